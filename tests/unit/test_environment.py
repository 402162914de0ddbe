"""One environment rule for the workers' config and a producer's default client.

The default client read ``JOBMASTER_REDIS_URL or REDIS_URL`` itself: a blank
``JOBMASTER_REDIS_URL=" "`` (``VAR= `` in a Compose file) hid ``REDIS_URL``
from the producer while the config took it as unset, so producer and workers
could reach different Redis servers. Both now go through ``env_value``.
"""

from __future__ import annotations

import itertools

import pytest

from jobmaster.client import Client
from jobmaster.config import load_config
from jobmaster.environment import env_value, redis_url
from jobmaster.redis_target import DEFAULT_URL

pytestmark = pytest.mark.timeout(30)

OURS = "redis://ours.example:6380/1"
PLATFORM = "redis://platform.example:6381/2"


def test_the_first_non_blank_variable_wins() -> None:
    assert env_value(["A", "B"], {"A": "1", "B": "2"}) == ("A", "1")
    assert env_value(["A", "B"], {"A": " \t", "B": "2"}) == ("B", "2")
    assert env_value(["A", "B"], {"A": ""}) is None
    assert env_value([], {"A": "1"}) is None


@pytest.mark.parametrize(
    ("ours", "platform"),
    list(itertools.product([None, "", "  ", OURS], [None, "", PLATFORM])),
)
def test_producer_and_workers_read_the_same_redis_url(
    monkeypatch: pytest.MonkeyPatch, ours: str | None, platform: str | None
) -> None:
    env = {
        name: value
        for name, value in (("JOBMASTER_REDIS_URL", ours), ("REDIS_URL", platform))
        if value is not None
    }
    expected = OURS if ours == OURS else PLATFORM if platform == PLATFORM else DEFAULT_URL
    assert redis_url(env) == expected
    assert load_config(None, env=env).redis_url == expected
    monkeypatch.delenv("JOBMASTER_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The default client's connection, as ``job.enqueue`` would make it (lazy: never used).
    pool = Client().redis.connection_pool.connection_kwargs
    host = expected.split("//")[1].split(":")[0]
    assert pool["host"] == host
