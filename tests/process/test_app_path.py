"""Where the app is found, and what ``check`` and ``enqueue`` say about it, as the
real command run from a folder that is not the app's.

App modules import with the current folder, the config file's folder and
the config's ``pythonpath`` on ``sys.path``; ``check`` refuses a periodic
entry or a middleware that names nothing the app registered.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster import exitcodes
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, toml_value

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]
K = Keys()
Run = Callable[..., JobmasterProcess]

# An app module that lives beside its config, not in the repository: it records
# its runs in Redis (the server named by JOBMASTER_REDIS_URL, as tests/jobs.py does).
APP = """
import os

import redis

import jobmaster


@jobmaster.job(name="pathapp.mark")
def mark(marker: str) -> None:
    redis.Redis.from_url(os.environ["JOBMASTER_REDIS_URL"]).sadd("test:done", marker)
"""


def project(root: Path, redis_url: str, module_dir: str = ".", **settings: object) -> Path:
    """``root/deploy/jobmaster.toml`` with the app module in ``deploy/<module_dir>``."""
    deploy = root / "deploy"
    (deploy / module_dir).mkdir(parents=True, exist_ok=True)
    (deploy / module_dir / "pathapp.py").write_text(APP)
    values: dict[str, object] = {
        "app": ["pathapp"],
        "redis_url": redis_url,
        "concurrency": 2,
        "poll_interval": 0.2,
        "shutdown_timeout": 5,
        **settings,
    }
    config = deploy / "jobmaster.toml"
    config.write_text("".join(f"{key} = {toml_value(value)}\n" for key, value in values.items()))
    return config


def jobmaster(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command run to its end, from ``cwd``, without the suite's fallback Redis URL
    (a config file's ``redis_url`` must be the one in force)."""
    environment = {
        k: v for k, v in os.environ.items() if k not in ("JOBMASTER_REDIS_URL", "REDIS_URL")
    }
    return subprocess.run(
        [jobmaster_command(), *args],
        cwd=cwd,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )


def test_check_imports_the_app_beside_the_config_from_another_folder(
    tmp_path: Path, redis_url: str
) -> None:
    config = project(tmp_path / "proj", redis_url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = jobmaster("check", "-c", str(config), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "pathapp.mark" in result.stdout and result.stdout.endswith("ok\n")


def test_the_config_file_may_come_before_the_command(tmp_path: Path, redis_url: str) -> None:
    """``jobmaster -c FILE check``, as people type it, is ``jobmaster check -c FILE``."""
    config = project(tmp_path / "proj", redis_url)
    result = jobmaster("-c", str(config), "check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pathapp.mark" in result.stdout


def test_pythonpath_is_relative_to_the_config_file(tmp_path: Path, redis_url: str) -> None:
    config = project(tmp_path / "proj", redis_url, module_dir="src", pythonpath=["src"])
    result = jobmaster("check", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pathapp.mark" in result.stdout


def test_without_pythonpath_the_error_says_where_it_looked(tmp_path: Path, redis_url: str) -> None:
    config = project(tmp_path / "proj", redis_url, module_dir="src")
    result = jobmaster("check", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 3, result.stderr  # exitcodes.APP_LOAD_FAILED
    assert "cannot import app module 'pathapp'" in result.stderr
    assert "pythonpath" in result.stderr and "Traceback" not in result.stderr


def test_a_pythonpath_of_the_wrong_type_names_the_key_and_the_file(
    tmp_path: Path, redis_url: str
) -> None:
    config = project(tmp_path / "proj", redis_url, pythonpath="src")
    result = jobmaster("check", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"{config}: 'pythonpath' must be a list of paths" in result.stderr


def test_the_readme_demo_checks_from_the_repository_root() -> None:
    """The README's own `jobmaster -c contrib/examples/demo.toml` (its app sits
    beside the config; its Redis is embedded, so check reaches none)."""
    for args in (
        ("check", "-c", "contrib/examples/demo.toml"),
        ("-c", "contrib/examples/demo.toml", "check"),
    ):
        result = jobmaster(*args, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        assert "demo_app.greet" in result.stdout


def test_check_refuses_a_periodic_entry_naming_no_registered_job(
    tmp_path: Path, redis_url: str
) -> None:
    config = project(tmp_path / "proj", redis_url)
    with config.open("a") as file:
        file.write('\n[periodic.nightly]\njob = "pathapp.mrak"\nevery = 60\n')
    result = jobmaster("check", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert f"{config}: [periodic.nightly] job 'pathapp.mrak' is not registered" in result.stderr
    assert "did you mean 'pathapp.mark'" in result.stderr
    assert "ok" not in result.stdout


def test_check_refuses_a_middleware_naming_no_class(tmp_path: Path, redis_url: str) -> None:
    config = project(tmp_path / "proj", redis_url, middleware=["pathapp:Audit"])
    result = jobmaster("check", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert f"{config}: middleware 'pathapp:Audit'" in result.stderr
    assert "ok" not in result.stdout


def test_the_master_imports_the_app_beside_the_config(
    run_jobmaster: Run, tmp_path: Path, redis_url: str, store: redis.Redis
) -> None:
    """run_jobmaster starts from the repository root: the app is not there."""
    config = project(tmp_path / "proj", redis_url, processes=1)
    process = run_jobmaster("-c", str(config))
    enqueued = jobmaster("enqueue", "-c", str(config), "pathapp.mark", '"by-master"', cwd=tmp_path)
    assert enqueued.returncode == 0, enqueued.stderr
    wait_until(
        lambda: store.sismember("test:done", "by-master"),
        timeout=20,
        message=f"the job did not run:\n{process.log()}",
    )


def test_a_lone_worker_imports_the_app_even_without_preload(
    run_jobmaster: Run, tmp_path: Path, redis_url: str, store: redis.Redis
) -> None:
    """``preload = false`` means "import in each child"; a lone worker is its own child."""
    config = project(tmp_path / "proj", redis_url, preload=False)
    process = run_jobmaster("worker", "-c", str(config))
    enqueued = jobmaster("enqueue", "-c", str(config), "pathapp.mark", '"by-worker"', cwd=tmp_path)
    assert enqueued.returncode == 0, enqueued.stderr
    wait_until(
        lambda: store.sismember("test:done", "by-worker"),
        timeout=20,
        message=f"the job did not run:\n{process.log()}",
    )


def test_enqueue_refuses_a_name_the_app_does_not_register_unless_forced(
    tmp_path: Path, redis_url: str, store: redis.Redis
) -> None:
    """It warned, exited 0, and the job went straight to the dead set."""
    config = project(tmp_path / "proj", redis_url)
    typo = jobmaster("enqueue", "-c", str(config), "pathapp.mrak", '"x"', cwd=tmp_path)
    assert typo.returncode == exitcodes.REFUSED, typo.stderr
    assert "no job 'pathapp.mrak' is registered by the app (pathapp)" in typo.stderr
    assert "did you mean 'pathapp.mark'" in typo.stderr
    assert "--force" in typo.stderr
    assert store.llen(K.queue("default")) == 0
    forced = jobmaster("enqueue", "-c", str(config), "--force", "pathapp.mrak", '"x"', cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "warning: no job 'pathapp.mrak' is registered" in forced.stderr
    known = jobmaster("enqueue", "-c", str(config), "pathapp.mark", '"y"', cwd=tmp_path)
    assert known.returncode == 0 and known.stderr == ""
    assert store.llen(K.queue("default")) == 2  # the forced one and the known one


def test_enqueue_for_an_app_not_importable_here_says_it_was_not_checked(
    tmp_path: Path, redis_url: str, store: redis.Redis
) -> None:
    """Producers may enqueue for another app's workers, without its code: the
    job goes, and the line says which case it is."""
    config = project(tmp_path / "proj", redis_url, app=["someone_elses.jobs"])
    result = jobmaster("enqueue", "-c", str(config), "someone_elses.jobs.send", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "not checked that a worker registers 'someone_elses.jobs.send'" in result.stderr
    assert "someone_elses" in result.stderr.split(":", 3)[-1]
    bare = project(tmp_path / "bare", redis_url, app=[])
    result = jobmaster("enqueue", "-c", str(bare), "someone_elses.jobs.send", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the config names no app" in result.stderr
    assert store.llen(K.queue("default")) == 2


def test_a_lone_worker_without_preload_runs_the_apps_jobs(
    run_jobmaster: Run, write_config: Callable[..., Path], redis_url: str, store: redis.Redis
) -> None:
    """The app (tests.jobs) is importable from the working folder here: only
    ``preload = false`` is at stake. The worker imported no app and buried every
    job as unknown."""
    process = run_jobmaster("worker", "-c", str(write_config(preload=False)))
    Client(redis_url).push({"job": "tests.record", "args": ["no-preload"]})
    wait_until(
        lambda: store.sismember("test:done", "no-preload"),
        timeout=20,
        message=f"the job did not run:\n{process.log()}",
    )
