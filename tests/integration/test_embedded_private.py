"""The embedded Redis's data_dir is ours alone (issue 16, item 13).

An existing 0755 data_dir let another local user read the append-only file
(job arguments); one owned by another user let that user swap redis.sock
for a server of their own and receive a producer's jobs. Now both are
refused with an error naming the directory, by ``jobmaster run`` and by a
producer, and what the server writes is created owner-only (umask 077).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobmaster.cli import main
from jobmaster.embedded import EmbeddedRedis, embedded_url
from jobmaster.errors import JobmasterError
from tests.process.conftest import ROOT, jobmaster_command

pytestmark = pytest.mark.timeout(60)
NOBODY = 65534
ENV = {"JOBMASTER_REDIS_URL": "embedded", "REDIS_URL": ""}  # the file's, not the suite's


def config(tmp: Path, data_dir: Path) -> Path:
    path = tmp / "jobmaster.toml"
    path.write_text(f'redis_url = "embedded"\ndata_dir = "{data_dir}"\nprocesses = 1\n')
    return path


def run_master(config_file: Path) -> subprocess.CompletedProcess[str]:
    """``jobmaster run``: refused at once, or killed after 20 s (a failure)."""
    with subprocess.Popen(
        [jobmaster_command(), "run", "-c", str(config_file)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as popen:
        try:
            output, _ = popen.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, 9)
            output, _ = popen.communicate(timeout=10)
            pytest.fail(f"jobmaster run started on a shared data_dir:\n{output}")
    return subprocess.CompletedProcess(popen.args, popen.returncode, output)


def test_a_data_dir_open_to_others_is_refused(short_tmp_dir: Path) -> None:
    data = short_tmp_dir / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    refused = run_master(config(short_tmp_dir, data))
    assert refused.returncode != 0
    assert f"data_dir {data} is open to other users (mode 755)" in refused.stdout, refused.stdout
    enqueue = CliRunner(env=ENV).invoke(
        main, ["enqueue", "-c", str(short_tmp_dir / "jobmaster.toml"), "tests.record", "1"]
    )
    assert enqueue.exit_code != 0 and f"data_dir {data} is open" in enqueue.output, enqueue.output


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to nobody")
def test_a_data_dir_of_another_user_is_refused(short_tmp_dir: Path) -> None:
    data = short_tmp_dir / "theirs"
    data.mkdir(mode=0o700)
    os.chown(data, NOBODY, NOBODY)
    refused = run_master(config(short_tmp_dir, data))
    assert refused.returncode != 0
    assert f"data_dir {data} belongs to uid {NOBODY}" in refused.stdout, refused.stdout


def test_what_the_server_writes_is_owner_only(short_tmp_dir: Path) -> None:
    server = EmbeddedRedis(short_tmp_dir / "data")
    old = os.umask(0o022)  # the usual umask: files would be 0644
    try:
        server.start()
        with server.process.client() as store:
            store.set("k", "v")
            store.execute_command("BGREWRITEAOF")
    finally:
        os.umask(old)
        server.stop()
    written = [p for p in (short_tmp_dir / "data").rglob("*") if not p.name.endswith(".lock")]
    assert written
    for path in written:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        assert not mode & 0o077 or path.is_symlink(), f"{path}: {mode:03o}"


def test_start_refuses_before_touching_anything(short_tmp_dir: Path) -> None:
    data = short_tmp_dir / "open"
    data.mkdir()
    data.chmod(0o750)
    with pytest.raises(JobmasterError, match=f"data_dir {data} is open to other users"):
        EmbeddedRedis(data).start()
    assert list(data.iterdir()) == []


def test_a_data_dir_that_is_a_symbolic_link_is_refused(short_tmp_dir: Path) -> None:
    """Issue 23 item 5: os.stat followed ``dd -> <another dir>``; whoever can
    write where the link lies could repoint it after the check."""
    target = short_tmp_dir / "target"
    target.mkdir(mode=0o700)
    link = short_tmp_dir / "dd"
    link.symlink_to(target)
    with pytest.raises(JobmasterError, match=f"data_dir {link} is a symbolic link"):
        EmbeddedRedis(link).start()
    with pytest.raises(JobmasterError, match="is a symbolic link"):
        embedded_url(link)  # a producer refuses it too
    assert list(target.iterdir()) == []
    dangling = short_tmp_dir / "dangling"
    dangling.symlink_to(short_tmp_dir / "nowhere")
    with pytest.raises(JobmasterError, match="is a symbolic link"):
        EmbeddedRedis(dangling).start()
    assert not (short_tmp_dir / "nowhere").exists()  # nothing created through it


def test_a_data_dir_in_a_directory_others_may_write_is_refused(short_tmp_dir: Path) -> None:
    """Its own mode 0700 is not enough: whoever can write the parent can rename
    it away and put their own directory in its place after the check."""
    shared = short_tmp_dir / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    data = shared / "data"
    data.mkdir(mode=0o700)
    with pytest.raises(JobmasterError, match=f"lies in {shared}, which other users may write"):
        EmbeddedRedis(data).start()
    assert list(data.iterdir()) == []
    with pytest.raises(JobmasterError, match="which other users may write"):
        embedded_url(data)


def test_a_data_dir_in_a_sticky_directory_like_tmp_is_accepted(short_tmp_dir: Path) -> None:
    """Sticky (1777, as /tmp): nobody may rename an entry they do not own."""
    sticky = short_tmp_dir / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    server = EmbeddedRedis(sticky / "data")
    server.start()
    try:
        with server.process.client() as store:
            assert store.ping()
    finally:
        server.stop()
    assert embedded_url(sticky / "data").startswith("unix://")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to nobody")
def test_a_data_dir_under_another_users_directory_is_refused(short_tmp_dir: Path) -> None:
    theirs = short_tmp_dir / "theirs"
    theirs.mkdir(mode=0o755)
    data = theirs / "data"
    data.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(JobmasterError, match=f"lies in {theirs}, which belongs to uid {NOBODY}"):
        EmbeddedRedis(data).start()
