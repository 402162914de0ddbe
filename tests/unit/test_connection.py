"""The Redis version check and URL resolution, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobmaster.connection import check_version, resolve_url
from jobmaster.errors import RedisVersionError


class FakeRedis:
    def __init__(self, version: str) -> None:
        self.version = version

    def info(self, section: str) -> dict[str, str]:
        assert section == "server"
        return {"redis_version": self.version}


@pytest.mark.parametrize("version", ["6.0.9", "5.0.14", "6.1.0"])
def test_redis_older_than_6_2_is_refused_with_a_clear_message(version: str) -> None:
    with pytest.raises(RedisVersionError, match=rf"Redis {version} is too old.*6\.2.*LMOVE"):
        check_version(FakeRedis(version))  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["6.2.0", "7.0.15", "7.4.1"])
def test_redis_6_2_and_newer_is_accepted(version: str) -> None:
    assert check_version(FakeRedis(version)) >= (6, 2)  # type: ignore[arg-type]


def test_embedded_resolves_to_the_socket_in_the_data_dir(tmp_path: Path) -> None:
    assert resolve_url("embedded", tmp_path) == f"unix://{tmp_path}/redis.sock?db=0"
    assert resolve_url("redis://h:1/0", tmp_path) == "redis://h:1/0"
