"""What every benchmark in bench/ needs around the thing it measures.

A private ``redis-server`` on a free port in a temporary directory (the
shared one on 6379 is never touched), the real ``jobmaster`` command as a
subprocess with a clean environment, the master's children from /proc, the
machine's figures printed beside every result, and the same ending for every
bench (a table on stderr, JSON on stdout). Kept here so each benchmark file
holds only its own measure.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import redis

import jobmaster
from jobmaster.embedded import RedisServerProcess

BENCH_DIR = Path(__file__).resolve().parent
NAMESPACE = "jobmaster"
PREFIX = f"{NAMESPACE}:{{{NAMESPACE}}}:"  # jobmaster.keys.Keys prefix of the default namespace
STOP_DEADLINE = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def jobmaster_executable() -> str:
    """The console script of the venv running the bench (not another install on PATH)."""
    beside = Path(sys.executable).parent / "jobmaster"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("jobmaster")
    if found is None:
        raise SystemExit("bench: no `jobmaster` console script next to python or on PATH")
    return found


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def children_of(pid: int) -> set[int]:
    """Live (or not yet reaped) children of ``pid``, from /proc."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split()}


def is_jobmaster(pid: int) -> bool:
    """A live jobmaster process (zombies have an empty cmdline)."""
    try:
        return b"jobmaster" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def call_counts(conn: redis.Redis) -> Counter[str]:
    """Calls per command since the server started (INFO commandstats)."""
    stats = conn.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def summary_ms(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min_ms": ordered[0],
        "median_ms": statistics.median(ordered),
        "mean_ms": statistics.fmean(ordered),
        "max_ms": ordered[-1],
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def machine_info(conn: redis.Redis) -> dict[str, Any]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = os.cpu_count()
    return {
        "nproc": affinity,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis": conn.info("server")["redis_version"],
        "redis_py": redis.__version__,
        "jobmaster": jobmaster.__version__,
    }


@contextlib.contextmanager
def private_redis(
    *, appendonly: bool = False, prefix: str = "jobmaster-bench-", keep: bool = False
) -> Iterator[tuple[Path, RedisServerProcess]]:
    """A started ``redis-server`` of the bench's own, in a new temp dir: (dir, server).

    No persistence by default, as the peers get in bench/peers.py (an fsync
    would be part of every figure); chaos.py asks for ``appendonly`` so a
    Redis restart keeps its jobs. The dir is the bench's scratch space too
    (configs, master logs). However the block ends, the server is stopped
    and the dir removed, so nothing outlives the bench; ``keep`` leaves the
    dir for a post-mortem of the logs.
    """
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    server = RedisServerProcess(tmp / "redis", port=free_port(), appendonly=appendonly)
    try:
        server.start()
        yield tmp, server
    finally:
        server.stop()
        if keep:
            print(f"bench: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def emit(
    report: dict[str, Any], print_table: Callable[[dict[str, Any]], None], no_table: bool = False
) -> int:
    """The end of every bench: the table on stderr (for a person) unless
    ``no_table``, the JSON on stdout (for a pipe or a file). The exit status:
    1 if the report has failed checks (``"ok": false``), else 0."""
    if not no_table:
        print_table(report)
    print(json.dumps(report, indent=2))
    return 0 if report.get("ok", True) else 1


def exit_on_term() -> None:
    """Turn SIGTERM into SystemExit, so a bench stopped by ``kill`` or a CI
    timeout still runs its ``finally``: no master or redis-server left behind."""

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(directory: Path, url: str, **settings: Any) -> Path:
    """``jobmaster.toml`` in ``directory`` for the private server, plus ``settings``."""
    values: dict[str, Any] = {
        "redis_url": url,
        "log_level": "info",
        "data_dir": str(directory / "data"),
        **settings,
    }
    path = directory / "jobmaster.toml"
    path.write_text("".join(f"{key} = {toml_value(v)}\n" for key, v in values.items()))
    return path


def clean_environment(url: str) -> dict[str, str]:
    """Our environment without anything that could point jobmaster elsewhere;
    bench/ importable (the bench job modules) and ``BENCH_REDIS_URL`` for the jobs."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBMASTER_") and k != "REDIS_URL"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))
    env["BENCH_REDIS_URL"] = url
    return env


class Master:
    """One ``jobmaster -c CONFIG [extra_args]`` process, its log appended to ``logfile``.

    It runs in its own session, so a Ctrl-C to the bench reaches only the
    bench, whose ``finally`` stops the master properly. ``env`` is added to
    the clean environment (e.g. the size of memory.py's app). ``redis_url``:
    the URL jobmaster is given, when not ``url`` (which the bench's jobs
    get): chaos.py adds ``?socket_timeout=`` to it, for jobmaster alone.
    """

    def __init__(
        self,
        config: Path,
        url: str,
        logfile: Path,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        redis_url: str | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        self.config = config
        self.wrap = wrap  # e.g. run it inside a memory cgroup (memory.py --leaks)
        self.url = url
        self.redis_url = redis_url or url
        self.logfile = logfile
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: set[int] = set()  # every child pid ever seen, to clean up after
        # Children that outlived a stop (and were SIGKILLed): a bug to report.
        # Kept across stops, so the no-op stop of a ``finally`` does not wipe it.
        self.left_behind: list[int] = []

    @property
    def pid(self) -> int:
        assert self.proc is not None, "master not started"
        return self.proc.pid

    def start(self) -> None:
        command = [jobmaster_executable(), "-c", str(self.config), "--redis-url", self.redis_url]
        with self.logfile.open("ab") as log:
            command = [*command, *self.extra_args]
            self.proc = subprocess.Popen(
                self.wrap(command) if self.wrap is not None else command,
                cwd=BENCH_DIR,
                env={**clean_environment(self.url), **self.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @contextlib.contextmanager
    def running(self, label: str = "master") -> Iterator[Master]:
        """Started for the block and stopped however it ends (a ``stop()``
        inside, to time it, makes the final one a no-op). On an error, the
        log's tail on stderr first: it is gone with the temp dir after."""
        self.start()
        try:
            yield self
        except BaseException:
            print(f"bench: {label} log tail:\n{log_tail(self.logfile)}", file=sys.stderr)
            raise
        finally:
            self.stop()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def children(self) -> set[int]:
        """The master's live children (zombies excluded)."""
        if not self.alive():
            return set()
        pids = {p for p in children_of(self.pid) if is_jobmaster(p)}
        self.seen |= pids
        return pids

    def wait_children(self, count: int, timeout: float = 60.0) -> float:
        """Until ``count`` children are alive; seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if not self.alive():
                raise RuntimeError(f"master exited: {self.returncode()}\n{log_tail(self.logfile)}")
            if len(self.children()) >= count:
                return time.monotonic() - started
            time.sleep(0.02)
        raise RuntimeError(f"never {count} children in {timeout}s\n{log_tail(self.logfile)}")

    def wait_exit(self, timeout: float = STOP_DEADLINE) -> int | None:
        if self.proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def stop(self, timeout: float = STOP_DEADLINE) -> tuple[float, int | None]:
        """TERM and wait (SIGKILL past ``timeout``); (seconds, exit code). Then
        SIGKILL any child ever seen that outlived it, so nothing is left behind
        (their pids in ``left_behind``). Safe to call again in a ``finally``."""
        started = time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            if self.wait_exit(timeout) is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        elapsed = time.monotonic() - started
        self.left_behind = sorted({*self.left_behind, *self.kill_leftovers()})
        return elapsed, self.returncode()

    def kill_leftovers(self) -> list[int]:
        """SIGKILL every child ever seen that still runs; their pids."""
        left = sorted(pid for pid in self.seen if is_jobmaster(pid))
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left

    def log_counts(self) -> dict[str, int]:
        """WARNING and ERROR/Traceback lines of the log: a clean run has none
        beyond what the bench caused on purpose."""
        log = self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
        return {
            "log_warnings": log.count("WARNING"),
            "log_errors": log.count("ERROR") + log.count("Traceback"),
        }


# -- counting commands by who sent them ----------------------------------------
MARK_START = "bench-window-start"
MARK_END = "bench-window-end"
MARK_STOP = "bench-monitor-stop"


class MonitorRecorder(threading.Thread):
    """Counts every command between two ECHO markers, split by source.

    INFO commandstats counts the commands Lua scripts run as well; MONITOR
    tells them apart (``client_type == "lua"``), so this gives round trips
    (what clients send) beside the work Redis does. MONITOR slows the server:
    use it on a counting run, never on a timed one.
    """

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(name="bench-monitor", daemon=True)
        self.conn = redis.Redis.from_url(url, socket_timeout=timeout)
        self.ready = threading.Event()
        self.client: Counter[str] = Counter()
        self.script: Counter[str] = Counter()
        self.by_connection: Counter[str] = Counter()
        self.error: str | None = None
        self.complete = False

    def run(self) -> None:
        inside = False
        try:
            with self.conn.monitor() as monitor:
                self.ready.set()
                while True:
                    event = monitor.next_command()
                    command = str(event.get("command", ""))
                    if MARK_STOP in command:
                        return
                    if MARK_START in command:
                        inside = True
                        continue
                    if MARK_END in command:
                        inside = False
                        self.complete = True
                        continue
                    if not inside:
                        continue
                    name = command.split(" ", 1)[0].lower()
                    if event.get("client_type") == "lua":
                        self.script[name] += 1
                    else:
                        self.client[name] += 1
                        self.by_connection[f"{event.get('client_port')}"] += 1
        except Exception as error:  # reported; the headline figures don't need it
            self.error = f"{type(error).__name__}: {error}"
        finally:
            self.ready.set()
            with contextlib.suppress(Exception):
                self.conn.close()

    def start_window(self, conn: redis.Redis) -> None:
        self.start()
        self.ready.wait(10)
        time.sleep(0.05)  # MONITOR's own reply comes before the feed: let it settle
        conn.echo(MARK_START)

    def end_window(self, conn: redis.Redis) -> None:
        conn.echo(MARK_END)
        conn.echo(MARK_STOP)
        self.join(10)
