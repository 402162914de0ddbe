"""Whoever can write to Redis cannot make a worker run, or import, anything unregistered.

Hostile payloads are pushed raw (as an attacker with Redis access would)
into the queue, the scheduled set and the retry set of a real worker. Each
names a callable that would leave a trace if it ever ran: a file in a
marker folder, a deleted victim file, a Redis key, or the import of a
module that touches a file when imported.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import payload as wire
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()
NEVER_IMPORTED = "tests.never_imported_module"
# Read by that module when imported; spelled here, since importing it to get
# the constant would import it.
MARKER_ENV = "JOBMASTER_TEST_IMPORT_MARKER"
StartWorker = Callable[[Config], WorkerProcess]


def hostile(marks: Path, victim: Path) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """(job name, args, kwargs): each would leave a trace in ``marks`` or delete ``victim``."""
    touch = f"touch {marks}/%s"
    return [
        ("os.system", [touch % "os_system"], {}),
        ("os.system", [], {"command": touch % "os_system_kwargs"}),
        ("posix.system", [touch % "posix_system"], {}),
        ("subprocess.call", [["touch", str(marks / "subprocess_call")]], {}),
        ("subprocess.run", [["touch", str(marks / "subprocess_run")]], {}),
        ("builtins.eval", [f"__import__('os').system('{touch % 'eval'}')"], {}),
        ("builtins.exec", [f"__import__('os').system('{touch % 'exec'}')"], {}),
        ("importlib.import_module", [NEVER_IMPORTED], {}),
        ("shutil.rmtree", [str(victim.parent)], {}),
        ("os.remove", [str(victim)], {}),
        (f"{NEVER_IMPORTED}.pwn", [str(marks / "module_function")], {}),
        (f"{NEVER_IMPORTED}:pwn", [str(marks / "module_colon_function")], {}),
        # Real functions of the test app that are not registered under these
        # names: tests.record is the job's name, tests.jobs.record its module
        # path; _hook_raises is a plain helper. Running either writes to Redis.
        ("tests.jobs.record", ["by-module-path"], {}),
        ("tests.jobs._hook_raises", [{"args": ["x"]}], {}),
    ]


def raw_payload(job: str, args: list[Any], kwargs: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "jid": secrets.token_hex(12),
            "job": job,
            "args": args,
            "kwargs": kwargs,
            "queue": "default",
            "retry": 3,
            "created_at": time.time(),
        }
    ).encode()


def dead_by_jid(store: redis.Redis) -> dict[str, dict[str, Any]]:
    return {entry["jid"]: entry for entry in map(json.loads, store.zrange(K.dead, 0, -1))}


def test_payloads_naming_unregistered_callables_are_buried_and_never_run(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    victim = tmp_path / "victim" / "keep.txt"
    victim.parent.mkdir()
    victim.write_text("still here")
    monkeypatch.setenv(MARKER_ENV, str(marks / "imported"))
    assert NEVER_IMPORTED not in sys.modules

    expected: dict[str, str] = {}  # jid -> job name
    for index, (job, args, kwargs) in enumerate(hostile(marks, victim)):
        raw = raw_payload(job, args, kwargs)
        expected[wire.decode(raw)["jid"]] = job  # type: ignore[index]
        # A third of them through each door: the queue, the scheduled and the retry set.
        if index % 3 == 0:
            store.rpush(K.queue("default"), raw)
        elif index % 3 == 1:
            store.zadd(K.scheduled, {raw: time.time() - 1})
        else:
            store.zadd(K.retry, {raw: time.time() - 1})
    worker = running_worker(make_config())

    wait_until(lambda: store.zcard(K.dead) >= len(expected), timeout=20, message="all buried")
    dead = dead_by_jid(store)
    assert set(dead) == set(expected)
    for jid, job in expected.items():
        assert dead[jid]["dead_reason"] == f"no job registered as {job!r}"

    # A registered job pushed afterwards runs: the worker is alive and has
    # handled everything before it, so nothing hostile is still pending.
    store.rpush(K.queue("default"), raw_payload("tests.record", ["after"], {}))
    wait_until(lambda: store.sismember("test:done", "after"), timeout=10, message="good job")
    assert all(thread.is_alive() for thread in worker.manager.processors)
    assert sorted(path.name for path in marks.iterdir()) == []  # no command ran, no import
    assert victim.read_text() == "still here"
    assert NEVER_IMPORTED not in sys.modules
    assert not store.sismember("test:done", "by-module-path")
    assert store.hget("test:hooks", "raising") is None
