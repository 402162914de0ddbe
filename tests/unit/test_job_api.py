"""The job API: naming, options, inline runs and enqueue-time argument checks, without Redis."""

from __future__ import annotations

import datetime
import importlib
import re
import uuid
from typing import Any

import pytest

import jobmaster
from jobmaster import registry, testing
from jobmaster.backoff import DEFAULT_RETRY
from jobmaster.job import BoundJob, JobFunction, JobOptions, unix_time

# ``jobmaster.job`` the attribute is the decorator, which shadows the module.
JOB_MODULE = importlib.import_module("jobmaster.job")


def unique_name() -> str:
    return f"tests.unit.{uuid.uuid4().hex}"


class RecordingClient:
    """Stands in for the default client: remembers what would have been pushed."""

    def __init__(self) -> None:
        self.pushed: list[tuple[list[dict[str, Any]], float | None]] = []

    def push_payloads(
        self, payloads: list[dict[str, Any]], at: float | None = None
    ) -> list[dict[str, Any]]:
        self.pushed.append((payloads, at))
        return payloads


@pytest.fixture
def no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything asks for the default client (and so for Redis).

    job.py imported the name, so it is patched where it is looked up too.
    """

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the default client (Redis) was used")

    monkeypatch.setattr("jobmaster.client.default_client", forbidden)
    monkeypatch.setattr(JOB_MODULE, "default_client", forbidden)


@pytest.fixture
def recording_client(monkeypatch: pytest.MonkeyPatch) -> RecordingClient:
    client = RecordingClient()
    monkeypatch.setattr("jobmaster.client.default_client", lambda: client)
    monkeypatch.setattr(JOB_MODULE, "default_client", lambda: client)
    return client


# -- names and forms ----------------------------------------------------------


def module_level_job(a: int, b: int = 2) -> int:
    """Adds."""
    return a + b


def test_default_name_is_module_and_qualname() -> None:
    class Holder:
        @staticmethod
        def method() -> None:
            pass

    decorated = jobmaster.job(Holder.method)
    assert decorated.name == f"{__name__}.{Holder.method.__qualname__}"
    assert decorated.name.endswith(
        "test_default_name_is_module_and_qualname.<locals>.Holder.method"
    )
    assert registry.lookup(decorated.name) is decorated


def test_bare_decorator_form() -> None:
    @jobmaster.job
    def local(x: int) -> int:
        return x * 2

    assert isinstance(local, JobFunction)
    assert local.name == f"{__name__}.test_bare_decorator_form.<locals>.local"
    assert local(4) == 8
    decorated = jobmaster.job(module_level_job)
    assert isinstance(decorated, JobFunction)
    assert decorated.name == f"{__name__}.module_level_job"
    assert decorated.job_options == JobOptions()
    assert decorated.__doc__ == "Adds."
    assert vars(decorated)["__name__"] == "module_level_job"


def test_called_decorator_form_with_name_and_options() -> None:
    name = unique_name()

    @jobmaster.job(name=name, queue="mail", retry=3, backoff=10, timeout=5)
    def send(user: int) -> str:
        return f"sent {user}"

    assert isinstance(send, JobFunction)
    assert send.name == name
    assert send.job_options == JobOptions(queue="mail", retry=3, backoff=10, timeout=5)
    assert registry.lookup(name) is send
    assert repr(send) == f"<job {name} queue=mail>"


def test_plain_call_runs_function_and_returns_value(no_redis: None) -> None:
    calls: list[tuple[int, int]] = []

    @jobmaster.job(name=unique_name())
    def add(a: int, b: int = 2) -> int:
        calls.append((a, b))
        return a + b

    assert add(1) == 3
    assert add(1, b=5) == 6
    assert calls == [(1, 2), (1, 5)]


def test_two_functions_under_one_name_is_an_error() -> None:
    name = unique_name()

    @jobmaster.job(name=name)
    def first() -> None:
        pass

    def second() -> None:
        pass

    with pytest.raises(ValueError, match=re.escape(f"two jobs are named {name!r}")):
        jobmaster.job(name=name)(second)
    assert registry.lookup(name) is first


def test_registering_same_function_again_is_fine() -> None:
    name = unique_name()

    def work() -> None:
        pass

    jobmaster.job(name=name)(work)
    again = jobmaster.job(name=name)(work)
    assert registry.lookup(name) is again


# -- options ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": ""}, "queue must be"),
        ({"queue": "a{b}"}, "queue must be"),
        ({"queue": 5}, "queue must be"),
        ({"retry": -1}, "retry must be"),
        ({"retry": 2.5}, "retry must be"),
        ({"retry": "3"}, "retry must be"),
        ({"backoff": "10s"}, "backoff must be seconds or a callable"),
        ({"backoff": True}, "backoff must be seconds or a callable"),
        ({"backoff": -1}, "backoff must be >= 0"),
        ({"timeout": 0}, "timeout must be seconds > 0"),
        ({"timeout": -1.5}, "timeout must be seconds > 0"),
        ({"timeout": True}, "timeout must be seconds > 0"),
        ({"timeout": "30"}, "timeout must be seconds > 0"),
    ],
)
def test_job_options_validation(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        JobOptions(**options)
    with pytest.raises(ValueError, match=re.escape(message)):
        jobmaster.job(name=unique_name(), **options)


def test_job_options_valid_values() -> None:
    assert JobOptions(retry=True).retry == DEFAULT_RETRY
    assert JobOptions(retry=False).retry is False
    assert JobOptions(retry=0).retry == 0
    assert JobOptions(backoff=0).backoff == 0
    assert JobOptions(timeout=0.5).timeout == 0.5

    def backoff(count: int) -> float:
        return float(count)

    assert JobOptions(backoff=backoff).backoff is backoff


def test_payload_fields_carry_numeric_backoff_and_timeout_only() -> None:
    assert JobOptions().payload_fields() == {}
    assert JobOptions(backoff=5, timeout=2).payload_fields() == {"backoff": 5, "timeout": 2}
    assert JobOptions(backoff=lambda count: 1.0).payload_fields() == {}


def test_options_unknown_name_is_type_error() -> None:
    name = unique_name()

    @jobmaster.job(name=name)
    def work() -> None:
        pass

    with pytest.raises(TypeError, match=rf"{re.escape(name)}: unknown option\(s\) bogus"):
        work.options(bogus=1)


def test_options_override_and_validate() -> None:
    @jobmaster.job(name=unique_name(), queue="default", retry=5)
    def work() -> None:
        pass

    bound = work.options(queue="critical", retry=True)
    assert isinstance(bound, BoundJob)
    assert bound.job_options.queue == "critical"
    assert bound.job_options.retry == DEFAULT_RETRY
    assert work.job_options.queue == "default", "the job's own options are unchanged"
    with pytest.raises(ValueError, match="retry must be"):
        work.options(retry=-2)


# -- enqueue ------------------------------------------------------------------


def test_enqueue_non_json_argument_fails_before_redis(no_redis: None) -> None:
    name = unique_name()

    @jobmaster.job(name=name)
    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the job must not run")

    moment = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    with pytest.raises(TypeError, match=rf"^{re.escape(name)}: argument 1 is a datetime"):
        work.enqueue(1, moment)
    with pytest.raises(TypeError, match=rf"^{re.escape(name)}: keyword argument 'tags' is a set"):
        work.enqueue_in(10, tags={"a"})
    with pytest.raises(TypeError, match=rf"^{re.escape(name)}: argument 0\['k'\] is a object"):
        work.options(queue="q").enqueue_at(moment, {"k": object()})


def test_enqueue_pushes_built_payload(recording_client: RecordingClient) -> None:
    name = unique_name()

    @jobmaster.job(name=name, queue="mail", retry=3, backoff=9)
    def work(user: int, *, template: str) -> None:
        raise AssertionError("enqueue must not run the job")

    jid = work.enqueue(7, template="welcome")
    ((payloads, at),) = recording_client.pushed
    (payload,) = payloads
    assert at is None
    assert payload["jid"] == jid
    assert re.fullmatch(r"[0-9a-f]{24}", jid)
    assert payload["job"] == name
    assert payload["args"] == [7]
    assert payload["kwargs"] == {"template": "welcome"}
    assert payload["queue"] == "mail"
    assert payload["retry"] == 3
    assert payload["backoff"] == 9


def test_enqueue_at_and_in_pass_due_time(recording_client: RecordingClient) -> None:
    @jobmaster.job(name=unique_name())
    def work() -> None:
        pass

    moment = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    work.enqueue_at(moment)
    work.enqueue_at(1_900_000_000)
    assert [at for _, at in recording_client.pushed] == [moment.timestamp(), 1_900_000_000.0]


# -- inline -------------------------------------------------------------------


def test_inline_runs_job_with_json_round_tripped_args(no_redis: None) -> None:
    received: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    @jobmaster.job(name=unique_name())
    def work(*args: Any, **kwargs: Any) -> str:
        received.append((args, kwargs))
        return "ignored"

    with testing.inline():
        jid = work.enqueue((1, 2), {"nested": (3,)}, flag=(True, None))
    assert re.fullmatch(r"[0-9a-f]{24}", jid)
    assert received == [(([1, 2], {"nested": [3]}), {"flag": [True, None]})]
    assert isinstance(received[0][0][0], list)


def test_inline_covers_enqueue_in_at_and_options(no_redis: None) -> None:
    runs: list[int] = []

    @jobmaster.job(name=unique_name())
    def work(n: int) -> None:
        runs.append(n)

    with testing.inline():
        work.enqueue_in(3600, 1)
        work.enqueue_at(datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc), 2)
        work.options(queue="other").enqueue(3)
    assert runs == [1, 2, 3]


def test_inline_still_checks_arguments(no_redis: None) -> None:
    @jobmaster.job(name=unique_name())
    def work(arg: object) -> None:
        raise AssertionError("must not run")

    with testing.inline(), pytest.raises(TypeError, match="argument 0 is a set"):
        work.enqueue({1})


def test_inline_job_exception_propagates_and_mode_ends(
    recording_client: RecordingClient,
) -> None:
    @jobmaster.job(name=unique_name())
    def boom() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), testing.inline():
        boom.enqueue()
    boom.enqueue()  # no longer inline: pushed, not run
    assert len(recording_client.pushed) == 1


def test_inline_nesting_and_exit_restore_normal_enqueue(
    recording_client: RecordingClient,
) -> None:
    runs: list[str] = []

    @jobmaster.job(name=unique_name())
    def work(tag: str) -> None:
        runs.append(tag)

    with testing.inline():
        with testing.inline():
            work.enqueue("inner")
        work.enqueue("outer, after inner exit")
        assert recording_client.pushed == []
    assert runs == ["inner", "outer, after inner exit"]
    jid = work.enqueue("after")
    assert runs == ["inner", "outer, after inner exit"]
    ((payloads, _),) = recording_client.pushed
    assert payloads[0]["jid"] == jid
    assert payloads[0]["args"] == ["after"]


# -- unix_time ----------------------------------------------------------------


def test_unix_time_aware_datetime() -> None:
    utc = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    assert unix_time(utc) == 1_704_067_200.0
    plus_two = datetime.datetime(
        2024, 1, 1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    assert unix_time(plus_two) == 1_704_067_200.0


def test_unix_time_naive_datetime_is_local_time() -> None:
    naive = datetime.datetime(2024, 6, 1, 12, 30)
    assert unix_time(naive) == naive.timestamp()


def test_unix_time_numbers() -> None:
    assert unix_time(1_700_000_000) == 1_700_000_000.0
    assert isinstance(unix_time(5), float)
    assert unix_time(12.5) == 12.5


@pytest.mark.parametrize(
    "when", ["2024-01-01", "1700000000", True, None, datetime.date(2024, 1, 1)]
)
def test_unix_time_refuses_other_types(when: object) -> None:
    with pytest.raises(TypeError, match="enqueue_at takes a datetime or unix time"):
        unix_time(when)  # type: ignore[arg-type]
