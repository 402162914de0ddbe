"""contrib/: the deployment files users copy must be valid and agree with each other.

What each checks is what goes wrong in production when it drifts: a stop
timeout shorter than ``shutdown_timeout`` (jobs SIGKILLed mid-run), a shell
as PID 1 (the master never sees the TERM), a root user, a config that the
loader refuses.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobmaster.config import Config, load_config
from jobmaster.settings import SETTINGS

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
CONTRIB = ROOT / "contrib"
EXAMPLE = CONTRIB / "examples" / "jobmaster.toml"
UNIT = CONTRIB / "systemd" / "jobmaster.service"
DOCKERFILE = CONTRIB / "docker" / "Dockerfile"
DEPLOYMENT = CONTRIB / "kubernetes" / "deployment.yaml"
HEROKU_KILL_AFTER = 30  # seconds between Heroku's TERM and its SIGKILL


def example() -> Config:
    return load_config(EXAMPLE, env={})


# --- contrib/examples/jobmaster.toml ------------------------------------------------


def test_the_example_config_loads() -> None:
    config = example()
    assert config.app == ["myapp.jobs"]
    assert config.max_child_mb == "auto"
    assert config.shutdown_timeout < HEROKU_KILL_AFTER
    assert config.log_format == "json"
    assert config.log_levels == {"jobmaster.worker.executor": "info"}
    assert set(config.periodic) == {"nightly_report"}


def test_the_example_config_mentions_every_setting() -> None:
    # Set, or commented out with its default: a new setting must be added here.
    text = EXAMPLE.read_text()
    missing = [
        name for name in SETTINGS if not re.search(rf"^((# )?{name} =|\[{name}\])", text, re.M)
    ]
    assert not missing, f"contrib/examples/jobmaster.toml does not mention {missing}"


def test_the_demo_uses_only_the_public_api() -> None:
    """The demo is what users copy: it reads ``jobmaster.Stats()``, not key names
    from ``jobmaster.keys`` (internal, free to change)."""
    tree = ast.parse((CONTRIB / "examples" / "demo.py").read_text())
    internal = [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jobmaster.")
    ]
    internal += [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("jobmaster.")
    ]
    assert not internal, f"contrib/examples/demo.py imports internal modules: {internal}"


# --- contrib/Procfile ---------------------------------------------------------------


def test_procfile_runs_the_master_with_the_config() -> None:
    lines = (CONTRIB / "Procfile").read_text().splitlines()
    assert lines == ["worker: jobmaster -c jobmaster.toml"]


# --- contrib/systemd/jobmaster.service ------------------------------------------------


def unit_sections(text: str) -> dict[str, dict[str, str]]:
    """``{section: {key: value}}``; later assignments win, as in systemd for these keys."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    return sections


def test_systemd_unit_stops_gracefully_and_tells_systemd_when_ready() -> None:
    service = unit_sections(UNIT.read_text())["Service"]
    assert service["Type"] == "notify"  # jobmaster/supervisor/sdnotify.py
    assert service["NotifyAccess"] == "main"
    assert service["KillMode"] == "mixed"  # TERM to the master, KILL to all after the timeout
    assert float(service["TimeoutStopSec"]) > example().shutdown_timeout
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"  # rolling restart
    assert service["Restart"] == "on-failure"
    assert service["User"] not in ("", "root", "0")
    assert service["WorkingDirectory"].startswith("/")
    assert shlex.split(service["ExecStart"])[1:] == ["-c", "/srv/myapp/jobmaster.toml"]
    # Exit codes 2 (config) and 3 (app import) would only restart into the same error.
    assert service["RestartPreventExitStatus"].split() == ["2", "3"]


def test_the_quiet_command_documented_in_the_unit_is_tstp() -> None:
    assert "systemctl kill -s TSTP jobmaster" in UNIT.read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not here")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this venv's jobmaster.
    command = shutil.which("jobmaster", path=str(Path(sys.executable).parent))
    assert command, "the jobmaster console script is not installed in this environment"
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={command}", UNIT.read_text(), flags=re.M)
    copy = tmp_path / "jobmaster.service"
    copy.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # Unknown keys and unparsable values are only warnings (exit 0), each
    # naming the file: any line that names it is a mistake in the unit.
    complaints = [line for line in result.stderr.splitlines() if "jobmaster.service" in line]
    assert result.returncode == 0, result.stderr
    assert not complaints, result.stderr


# --- contrib/docker/Dockerfile ---------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` in order, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_dockerfile_makes_the_master_pid_1_as_a_non_root_user() -> None:
    steps = instructions(DOCKERFILE.read_text())
    values = dict(steps)  # the last of each instruction
    # Exec form (a JSON array): a shell form would make /bin/sh PID 1, and
    # the TERM would never reach the master.
    entrypoint = json.loads(values["ENTRYPOINT"])
    cmd = json.loads(values["CMD"])
    assert entrypoint == ["jobmaster"]
    assert cmd[0] == "-c"
    assert values["STOPSIGNAL"] == "SIGTERM"
    user = values["USER"].split(":")[0]
    assert user not in ("root", "0")
    names = [keyword for keyword, _ in steps]
    assert names.index("USER") < names.index("ENTRYPOINT")
    assert any(k == "RUN" and "pip install" in v and "jobmaster" in v for k, v in steps)
    copied = [v.split()[-1] for k, v in steps if k == "COPY"]
    assert cmd[1] in copied, "the config CMD names is not copied into the image"


# --- contrib/kubernetes/deployment.yaml ------------------------------------------------


def manifests() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(DEPLOYMENT.read_text())}


def test_kubernetes_config_map_is_a_valid_config(tmp_path: Path) -> None:
    data = manifests()["ConfigMap"]["data"]
    path = tmp_path / "jobmaster.toml"
    path.write_text(data["jobmaster.toml"])
    config = load_config(path, env={})
    assert config.max_child_mb == "auto"


def test_kubernetes_grace_period_outlasts_the_shutdown_timeout(tmp_path: Path) -> None:
    found = manifests()
    path = tmp_path / "jobmaster.toml"
    path.write_text(found["ConfigMap"]["data"]["jobmaster.toml"])
    pod = found["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > load_config(path, env={}).shutdown_timeout


def test_kubernetes_pod_quiets_first_has_limits_and_reads_the_config_map() -> None:
    found = manifests()
    pod = found["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "TSTP" in " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    resources = container["resources"]
    assert resources["limits"]["memory"]  # what max_child_mb = "auto" divides
    assert resources["requests"]["memory"] and resources["requests"]["cpu"]
    [mount] = container["volumeMounts"]
    assert container["args"] == ["-c", f"{mount['mountPath']}/jobmaster.toml"]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == found["ConfigMap"]["metadata"]["name"]
    # The Dockerfile's numeric user, which runAsNonRoot can check.
    docker_user = dict(instructions(DOCKERFILE.read_text()))["USER"].split(":")[0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert str(pod["securityContext"]["runAsUser"]) == docker_user


# --- README ---------------------------------------------------------------------------


def test_readme_deployment_section_explains_each_file() -> None:
    readme = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings.index("Deployment") + 1 == headings.index("Reliability")
    section = readme.split("## Deployment", 1)[1].split("\n## ", 1)[0]
    for path in (CONTRIB / "Procfile", UNIT, DOCKERFILE, DEPLOYMENT, EXAMPLE):
        assert str(path.relative_to(ROOT)) in section, f"README's Deployment skips {path.name}"


def test_the_demo_config_starts_what_its_header_says() -> None:
    """Its header says one worker process: it started one per CPU (2 x 5 here)."""
    demo = CONTRIB / "examples" / "demo.toml"
    config = load_config(demo, env={})
    assert "one worker process of 5 job threads" in demo.read_text()
    assert (config.processes, config.concurrency) == (1, 5)


def test_check_lists_the_built_in_job_apart_from_the_apps() -> None:
    """``jobs:`` listed jobmaster.on_failure among the demo's, with no word of
    what it is. The embedded Redis is not started by check: no Redis here."""
    from click.testing import CliRunner

    from jobmaster.cli import main

    result = CliRunner().invoke(
        main, ["check", "-c", str(CONTRIB / "examples" / "demo.toml"), "--redis-url", "embedded"]
    )
    assert result.exit_code == 0, result.output
    lines = dict(line.split(":", 1) for line in result.output.splitlines() if ":" in line)
    jobs = lines["jobs"].strip().split(", ")  # and the suite's, registered in this process
    assert {"demo_app.add", "demo_app.greet"} <= set(jobs)
    assert "jobmaster.on_failure" not in jobs
    assert lines["built in"].strip().startswith("jobmaster.on_failure (runs a job's on_failure")
