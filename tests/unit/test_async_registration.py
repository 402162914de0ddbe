"""``async def`` jobs register as async jobs (SPEC 12); async generators are refused.

An async generator would give a worker an async iterator: the job recorded
complete with its body never run. A TypeError at import is seen at once;
nothing is registered.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import jobmaster
from jobmaster import registry

pytestmark = pytest.mark.timeout(30)


def unique_name() -> str:
    return f"tests.unit.{uuid.uuid4().hex}"


async def fetch(url: str) -> int:
    return len(url)


async def pages() -> AsyncIterator[int]:
    yield 1


class Fetcher:
    async def __call__(self, url: str) -> int:
        return len(url)


class SyncCallable:
    def __call__(self) -> str:
        return "ran"


@pytest.mark.parametrize(
    "target",
    [fetch, Fetcher(), functools.partial(fetch, "https://example.com")],
    ids=["async-def", "async-__call__", "partial-of-async"],
)
def test_an_async_def_job_registers_as_async(target: Any) -> None:
    name = unique_name()
    job = jobmaster.job(name=name)(target)
    assert registry.lookup(name) is job
    assert job.is_async
    assert registry.any_async()


def test_calling_an_async_job_returns_its_coroutine() -> None:
    job = jobmaster.job(name=unique_name())(fetch)
    coroutine = job("https://example.com")
    assert asyncio.iscoroutine(coroutine)
    assert asyncio.run(coroutine) == len("https://example.com")


@pytest.mark.parametrize("form", ["bare", "name", "options"])
def test_an_async_generator_is_a_type_error(form: str) -> None:
    name = unique_name()
    before = registry.names()
    with pytest.raises(TypeError, match="is an async generator"):
        if form == "bare":
            jobmaster.job(pages)
        elif form == "name":
            jobmaster.job(name=name)(pages)
        else:
            jobmaster.job(name=name, queue="slow", retry=1, timeout=5)(pages)
    assert registry.names() == before


def test_sync_callables_are_still_sync_jobs() -> None:
    name = unique_name()
    job = jobmaster.job(name=name)(SyncCallable())
    assert registry.lookup(name) is job
    assert not job.is_async
    assert job() == "ran"
