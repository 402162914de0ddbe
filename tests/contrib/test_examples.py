"""contrib/examples/fastapi_app.py and flask_app.py, each with a real worker that
imports the example as its app module, driven through the framework's test client."""

from __future__ import annotations

import importlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

import jobmaster
from jobmaster import exitcodes
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
EXAMPLES = ROOT / "contrib" / "examples"
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


@pytest.fixture
def example(
    request: pytest.FixtureRequest,
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[ModuleType, Path]]:
    """The example module (imported here, as the web app does) and its config,
    with a worker running that imported the same module."""
    name: str = request.param
    pytest.importorskip({"fastapi_app": "fastapi", "flask_app": "flask"}[name])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(jobmaster.client, "_default", None)  # create_app configures it
    # The environment wins over the file (the config's precedence): this
    # session points it nowhere (tests/conftest.py).
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)
    module = importlib.import_module(name)
    config = write_config(app=[name], pythonpath=[str(EXAMPLES)], processes=1)
    master = run_jobmaster("-c", str(config))
    wait_for_worker(store, master)
    yield module, config
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK, master.log()


@pytest.mark.parametrize("example", ["fastapi_app"], indirect=True)
def test_fastapi_enqueues_waits_for_the_result_and_mounts_the_dashboard(
    example: tuple[ModuleType, Path],
) -> None:
    from fastapi.testclient import TestClient

    module, config = example
    with TestClient(module.create_app(str(config)), base_url="http://localhost") as web:
        accepted = web.post("/thumbnails/42", params={"size": 64})
        assert accepted.status_code == 202
        jid = accepted.json()["jid"]
        done = web.get(f"/jobs/{jid}", params={"wait": 20})
        assert done.status_code == 200
        assert done.json() == {
            "jid": jid,
            "status": "complete",
            "result": {"image": 42, "size": 64, "path": "/thumbs/42-64.png"},
        }

        refused = web.post("/thumbnails/1", params={"size": 0}).json()["jid"]
        failed = web.get(f"/jobs/{refused}", params={"wait": 20}).json()
        assert failed["status"] == "dead"  # Permanent: not retried
        assert failed["error"]["class"] == "Permanent"
        assert web.get("/jobs/0123456789abcdef01234567").status_code == 404

        board = web.get("/admin/jobs/")
        assert board.status_code == 200
        assert 'href="/admin/jobs/queues"' in board.text  # its links follow the prefix


@pytest.mark.parametrize("example", ["flask_app"], indirect=True)
def test_flask_jobs_run_inside_the_app_context(example: tuple[ModuleType, Path]) -> None:
    module, config = example
    web = module.create_app(str(config)).test_client()
    accepted = web.post("/users/7/welcome")
    assert accepted.status_code == 202
    jid = accepted.get_json()["jid"]
    answers: list[Any] = []

    def ended() -> bool:
        answer = web.get(f"/jobs/{jid}")
        answers[:] = [answer]
        return answer.status_code != 202

    wait_until(ended, timeout=30, interval=0.05, message="the welcome job to end")
    (answer,) = answers
    assert answer.status_code == 200, answer.get_json()
    # current_app.config and url_for(_external=True) worked in the worker's job
    assert answer.get_json()["result"] == {
        "from": "welcome@example.com",
        "to": "user-7@example.com",
        "link": "http://localhost:5000/users/7",
    }
    assert web.get("/jobs/0123456789abcdef01234567").status_code == 404
