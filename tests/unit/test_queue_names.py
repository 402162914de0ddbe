"""One queue-name rule for the config, the job API and ``Client.push``.

``Client.push`` used to accept any queue name, so a producer could push to
a queue (``"a b"``, ``"x:2"``) that no worker's config can name: the job
waited forever. The three entry points now refuse the same names.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import load_config
from jobmaster.errors import ConfigError
from jobmaster.job_options import JobOptions
from jobmaster.queue_names import queue_name

pytestmark = pytest.mark.timeout(30)

REFUSED: list[Any] = ["", "a b", "a\tb", "x:2", "a,b", "a{b}", "}", 5, None]
ACCEPTED = ["default", "critical", "emails-2", "a.b", "é", "a/b"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_every_entry_point_accepts_a_queue_name(name: str) -> None:
    assert queue_name(name) == name
    assert JobOptions(queue=name).queue == name
    assert load_config(None, {"queues": [name]}).queue_names == [name]


@pytest.mark.parametrize("name", REFUSED)
def test_every_entry_point_refuses_the_same_names(name: Any) -> None:
    with pytest.raises(ValueError, match="must be non-empty"):
        queue_name(name)
    with pytest.raises(ValueError, match="queue must be non-empty"):
        JobOptions(queue=name)
    # Refused before any connection is made: this Redis is never reached.
    client = Client(connection=redis.Redis(port=1))
    with pytest.raises(ValueError, match=r"x\.y: 'queue' must be non-empty"):
        client.push({"job": "x.y", "queue": name})


@pytest.mark.parametrize("name", [n for n in REFUSED if isinstance(n, str) and n])
def test_the_config_refuses_them_too(name: str) -> None:
    # crash_queue takes one name: in ``queues``, "x:2" is a weight and "a,b" a list.
    with pytest.raises(ConfigError, match="queue names must be non-empty"):
        load_config(None, {"crash_queue": name})
