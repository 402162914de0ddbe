"""Key names: one Redis Cluster hash tag per namespace, no overlap between namespaces."""

from __future__ import annotations

import datetime
import inspect

import pytest

from jobmaster.keys import Keys


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: between the first ``{`` and the next ``}``."""
    start = key.find("{")
    if start == -1:
        return key
    end = key.find("}", start + 1)
    if end in (-1, start + 1):  # no closing brace, or an empty tag: the whole key
        return key
    return key[start + 1 : end]


def all_keys(keys: Keys) -> list[str]:
    """Every key and channel name a namespace has, found by introspection.

    Walking the class means a key added later is covered without editing
    this test.
    """
    day = datetime.date(2026, 11, 29)
    arguments = {
        "name": "critical",
        "queue": "critical",
        "identity": "host:123:abc",
        "day": day,
        "jid": "0123456789abcdef01234567",
        "digest": "0123456789abcdef0123456789abcdef",
        "bid": "fedcba9876543210fedcba98",
        "cid": "00112233445566778899aabb",
        "sid": "a-dashboard-session-id",
        "minute": 29_412_345,
        "window": 29_412,
    }
    names: list[str] = []
    for attribute, member in inspect.getmembers(Keys):
        if attribute.startswith("_"):
            continue
        if isinstance(member, property):
            names.append(getattr(keys, attribute))
        elif inspect.isfunction(member):
            parameters = list(inspect.signature(member).parameters)[1:]
            names.append(getattr(keys, attribute)(*(arguments[p] for p in parameters)))
    return names


def test_hash_tag_helper() -> None:
    assert hash_tag("a:{ns}:b") == "ns"
    assert hash_tag("a:{ns}:{other}") == "ns"
    assert hash_tag("plain") == "plain"
    assert hash_tag("a{}b") == "a{}b"


def test_introspection_finds_every_key() -> None:
    found = all_keys(Keys())
    # Guard the guard: the walk must see the keys the scripts depend on.
    expected = {
        "queue",
        "queues",
        "paused",
        "wakeup_channel",
        "inprogress",
        "processes",
        "heartbeat",
        "control",
        "scheduled",
        "retry",
        "dead",
        "stat",
        "stat_day",
    }
    public = {name for name, _ in inspect.getmembers(Keys) if not name.startswith("_")}
    assert expected <= public
    assert len(found) == len(public)
    assert len(set(found)) == len(found), "two kinds of key share a name"


@pytest.mark.parametrize("namespace", ["jobmaster", "app", "my-app_2", "a.b"])
def test_every_key_shares_the_namespace_hash_tag(namespace: str) -> None:
    keys = Keys(namespace)
    for key in all_keys(keys):
        assert key.startswith(f"{namespace}:{{{namespace}}}:"), key
        assert hash_tag(key) == namespace, key


def test_default_namespace() -> None:
    keys = Keys()
    assert keys.namespace == "jobmaster"
    assert keys.queue("default") == "jobmaster:{jobmaster}:queue:default"
    assert keys.stat_day("processed", datetime.date(2026, 11, 29)) == (
        "jobmaster:{jobmaster}:stat:processed:2026-11-29"
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [("jobmaster", "jobmaster2"), ("app", "app:staging"), ("a", "b"), ("prod", "prod-2")],
)
def test_namespaces_do_not_collide(first: str, second: str) -> None:
    one, two = all_keys(Keys(first)), all_keys(Keys(second))
    assert not set(one) & set(two)
    assert hash_tag(one[0]) != hash_tag(two[0])
    # Queue keys differ even for queue names that mimic the other namespace.
    assert Keys(first).queue("x") != Keys(second).queue("x")


def test_queue_names_with_braces_keep_the_namespace_tag() -> None:
    assert hash_tag(Keys("ns").queue("a{b}c")) == "ns"
