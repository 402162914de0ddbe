"""``async def`` jobs are refused at decoration until async jobs are supported.

A worker called one, got a coroutine it never awaited ("RuntimeWarning:
coroutine ... was never awaited"), and recorded the job complete with its
body never run. A TypeError at import is seen at once; nothing is registered.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import jobmaster
from jobmaster import registry

pytestmark = pytest.mark.timeout(30)
MESSAGE = r"is an async def function: async jobs are not supported yet"


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
    [fetch, pages, Fetcher(), functools.partial(fetch, "https://example.com")],
    ids=["async-def", "async-generator", "async-__call__", "partial-of-async"],
)
@pytest.mark.parametrize("form", ["bare", "name", "options"])
def test_an_async_job_is_a_type_error(target: Any, form: str) -> None:
    name = unique_name()
    before = registry.names()
    with pytest.raises(TypeError, match=MESSAGE):
        if form == "bare":
            jobmaster.job(target)
        elif form == "name":
            jobmaster.job(name=name)(target)
        else:
            jobmaster.job(name=name, queue="slow", retry=1, timeout=5)(target)
    assert registry.names() == before


def test_the_decorator_form_is_refused_where_it_is_written() -> None:
    with pytest.raises(TypeError, match=rf"job '.*\.handler' {MESSAGE}"):

        @jobmaster.job
        async def handler() -> None:
            pass


def test_sync_callables_are_still_jobs() -> None:
    name = unique_name()
    job = jobmaster.job(name=name)(SyncCallable())
    assert registry.lookup(name) is job
    assert job() == "ran"
