"""Every shell command of the README, run as printed, in a copy of the repository.

A newcomer met "command not found" (no venv on PATH), a config the
repository lacks, an example app that was not there: each command here is
taken from the README's ``sh`` blocks and run from the root of a temporary
copy, on the embedded Redis the README's own lines choose. A command that
fails, or a README edit that adds one this walk cannot run, fails the test.

What is not run as printed, and why (each said where it is met below):
- ``python3 -m venv .venv`` and ``pip install``: the copy's ``.venv`` is this
  test's environment (a link): installing is what .ci/run's install proves;
- ``.venv/bin/pytest``: the suite that runs this test;
- ``jobmaster web``: run until it serves, on a free port (8321 may be taken
  by another run on this host), then stopped;
- the master's metrics port (9187 in the example) is a free one, through
  JOBMASTER_METRICS_PORT, for the same reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_until
from tests.process.conftest import ROOT, TAG, tagged

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]
README = ROOT / "README.md"
NOT_RUN = ("python3 -m venv .venv", ".venv/bin/pip install")
THE_SUITE = ".venv/bin/pytest"


def readme_commands(text: str) -> list[str]:
    """The commands of every ``sh`` block: in a block with ``$`` prompts only the
    prompted lines (the rest is their output); elsewhere every line."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        lines = block.splitlines()
        prompted = any(line.startswith("$ ") for line in lines)
        for line in lines:
            if prompted and not line.startswith("$ "):
                continue
            command = line.removeprefix("$ ").strip()
            if command:
                commands.append(command)
    return commands


@dataclass
class Shell:
    """Just enough of a shell for the README's lines: ``.``, ``export``, ``&``,
    ``kill %N`` and ``&&``."""

    root: Path
    env: dict[str, str]
    jobs: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def run(self, line: str) -> None:
        background = line.split("#", 1)[0].rstrip().endswith("&")
        for part in re.split(r"\s&&\s", line.split("  #", 1)[0].strip().rstrip("&").strip()):
            self.one(part, background)
        self.ran.append(line)

    def one(self, text: str, background: bool) -> None:
        if text.startswith(NOT_RUN) or text.startswith(THE_SUITE):
            return  # installed already (the copy's .venv is this one); the suite itself
        words = shlex.split(text, comments=True)
        builtin = {".": self.activate, "export": self.export, "kill": self.kill}.get(words[0])
        if builtin is not None:
            builtin(words)
        elif words[:2] == ["jobmaster", "web"]:
            self.serve(words)
        elif background:
            self.start(words)
        else:
            done = subprocess.run(
                self.resolve(words), cwd=self.root, env=self.env, capture_output=True,
                text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (
                f"`{text}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
            )

    def activate(self, words: list[str]) -> None:
        assert words[1:] == [".venv/bin/activate"], words
        self.env["PATH"] = f"{self.root / '.venv' / 'bin'}{os.pathsep}{self.env['PATH']}"
        self.env["VIRTUAL_ENV"] = str(self.root / ".venv")

    def export(self, words: list[str]) -> None:
        name, value = words[1].split("=", 1)
        self.env[name] = value

    def kill(self, words: list[str]) -> None:
        signum = signal.Signals["SIG" + words[1].lstrip("-")] if len(words) > 2 else 15
        self.stop(int(words[-1].removeprefix("%")), signum)

    def resolve(self, words: list[str]) -> list[str]:
        """A bare ``jobmaster`` must be found on the PATH the README's lines set."""
        if "/" in words[0]:  # a path: from the copy's root, as the shell would
            assert (self.root / words[0]).exists(), f"`{words[0]}`: no such file"
            return words
        found = shutil.which(words[0], path=self.env["PATH"])
        assert found, f"`{words[0]}`: command not found (PATH from the README's lines)"
        if words[0] == "jobmaster":
            assert Path(found).parent == self.root / ".venv" / "bin", found
        return [found, *words[1:]]

    def start(self, words: list[str], *, master: bool = True) -> None:
        log = self.root / f"job-{len(self.jobs) + 1}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                self.resolve(words), cwd=self.root, env=self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.jobs.append((popen, log))
        if master:  # the README's next lines talk to it
            wait_until(
                lambda: "children up" in log.read_text() or popen.poll() is not None,
                timeout=60,
                message="the master's children",
            )
            assert popen.poll() is None, log.read_text()

    def stop(self, number: int, signum: int) -> None:
        """The README's ``kill``: the job must exit 0 (a graceful stop)."""
        popen, log = self.jobs[number - 1]
        popen.send_signal(signum)
        code = popen.wait(timeout=60)
        assert code == 0, f"job %{number} exited {code}:\n{log.read_text()}"

    def serve(self, words: list[str]) -> None:
        """Until it answers on its port (uvicorn handles TERM from then on)."""
        port = free_port()
        self.start([*words, "--port", str(port)], master=False)
        popen, log = self.jobs[-1]
        wait_until(
            lambda: answers(port) or popen.poll() is not None,
            timeout=30,
            message="jobmaster web serving",
        )
        assert f":{port}/" in log.read_text(), log.read_text()
        popen.send_signal(signal.SIGTERM)
        # uvicorn stops gracefully, then re-raises the TERM it caught (0.29+).
        assert popen.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()


def answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def copy() -> Iterator[Path]:
    """The README and contrib/ in a fresh folder, with this environment as its
    .venv; a short path (not tmp_path), as the embedded Redis's unix socket
    must be under 100 bytes."""
    root = Path(tempfile.mkdtemp(prefix="jm-readme-"))
    shutil.copy(README, root / "README.md")
    shutil.copytree(
        ROOT / "contrib",
        root / "contrib",
        ignore=shutil.ignore_patterns(".jobmaster", "__pycache__"),
    )
    (root / ".venv").symlink_to(Path(sys.prefix))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_every_readme_command_works_as_printed(copy: Path) -> None:
    commands = readme_commands(README.read_text())
    assert any(c.startswith("jobmaster check") for c in commands), commands
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("JOBMASTER_REDIS_URL", "REDIS_URL")}
    env.update({TAG: tag, "JOBMASTER_METRICS_PORT": str(free_port())})
    shell = Shell(copy, env)
    try:
        for line in commands:
            shell.run(line)
        assert shell.ran == commands
    finally:
        for process in tagged(tag):
            with contextlib.suppress(psutil.Error):
                process.kill()
        for popen, _ in shell.jobs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=10)
