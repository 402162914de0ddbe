"""The wire format: argument checks, building, encoding, decoding and burying payloads."""

from __future__ import annotations

import datetime
import json
import math
import re
import time
from typing import Any

import pytest

from jobmaster import payload as wire

JOB = "app.jobs.send_email"


def valid_payload(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"jid": "a" * 24, "job": JOB, "args": [1], "queue": "default"}
    payload.update(overrides)
    return payload


def raw(value: object) -> bytes:
    return json.dumps(value).encode()


class Opaque:
    pass


# -- check_json / check_arguments -------------------------------------------


@pytest.mark.parametrize(
    ("bad", "described"),
    [
        (datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), "a datetime"),
        ({1, 2}, "a set"),
        (Opaque(), "a Opaque"),
        (b"bytes", "a bytes"),
    ],
)
def test_check_arguments_names_job_position_and_type(bad: object, described: str) -> None:
    with pytest.raises(TypeError) as info:
        wire.check_arguments(JOB, ["fine", bad], {})
    message = str(info.value)
    assert message.startswith(f"{JOB}: argument 1 is {described},")
    assert "not JSON-serialisable" in message


def test_check_arguments_names_keyword() -> None:
    with pytest.raises(TypeError, match=rf"^{re.escape(JOB)}: keyword argument 'when' is a set"):
        wire.check_arguments(JOB, [1, 2], {"user": 3, "when": {4}})


def test_check_arguments_names_nested_path() -> None:
    args = [{"users": [1, {"id": 2, "seen": datetime.date(2024, 1, 1)}]}]
    with pytest.raises(TypeError) as info:
        wire.check_arguments(JOB, args, {})
    assert str(info.value).startswith(f"{JOB}: argument 0['users'][1]['seen'] is a date,")


def test_check_arguments_names_nested_keyword_path() -> None:
    with pytest.raises(TypeError) as info:
        wire.check_arguments(JOB, [], {"options": {"tags": ("a", Opaque())}})
    assert str(info.value).startswith(f"{JOB}: keyword argument 'options'['tags'][1] is a Opaque")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_check_arguments_refuses_non_finite_floats(bad: float) -> None:
    with pytest.raises(TypeError) as info:
        wire.check_arguments(JOB, [[0.5, bad]], {})
    assert str(info.value) == f"{JOB}: argument 0[1] is {bad!r}, which JSON cannot represent"


@pytest.mark.parametrize("key", [1, 2.5, None, ("a", "b")])
def test_check_arguments_refuses_non_string_dict_keys(key: object) -> None:
    with pytest.raises(TypeError) as info:
        wire.check_arguments(JOB, [], {"mapping": {"ok": 1, key: "x"}})
    assert str(info.value) == (
        f"{JOB}: keyword argument 'mapping' has a non-string key {key!r}; JSON keys are strings"
    )


def test_check_arguments_reports_first_bad_argument() -> None:
    with pytest.raises(TypeError, match=r"argument 1 is a set"):
        wire.check_arguments(JOB, [1, {2}, Opaque()], {"k": Opaque()})


def test_check_arguments_accepts_json_values_and_tuples() -> None:
    args = [None, True, 0, -3, 1.5, "text", [1, [2]], (1, (2, "x")), {"a": {"b": [None]}}]
    wire.check_arguments(JOB, args, {"t": (1, 2), "d": {"": 0.0}})
    wire.check_arguments(JOB, (), {})


# -- build --------------------------------------------------------------------


def test_build_fields() -> None:
    before = time.time()
    payload = wire.build(JOB, (1, "x"), {"k": [2]}, queue="mail")
    after = time.time()
    assert re.fullmatch(r"[0-9a-f]{24}", payload["jid"])
    assert payload["job"] == JOB
    assert payload["args"] == [1, "x"]
    assert isinstance(payload["args"], list)
    assert payload["kwargs"] == {"k": [2]}
    assert payload["queue"] == "mail"
    assert before <= payload["created_at"] <= after
    assert "retry" not in payload
    assert set(payload) == {"jid", "job", "args", "kwargs", "queue", "created_at"}


@pytest.mark.parametrize("retry", [0, 3, False, True])
def test_build_sets_retry_only_when_given(retry: int | bool) -> None:
    payload = wire.build(JOB, [], {}, queue="default", retry=retry)
    assert payload["retry"] is retry


def test_build_adds_extra_fields() -> None:
    payload = wire.build(JOB, [], {}, queue="q", extra={"backoff": 5, "timeout": 30.0})
    assert payload["backoff"] == 5
    assert payload["timeout"] == 30.0


def test_build_jids_differ() -> None:
    jids = {wire.build(JOB, [], {}, queue="q")["jid"] for _ in range(200)}
    assert len(jids) == 200


def test_build_checks_arguments() -> None:
    with pytest.raises(TypeError, match=rf"^{re.escape(JOB)}: argument 0 is a set"):
        wire.build(JOB, [{1}], {}, queue="q")


# -- encode -------------------------------------------------------------------


def test_encode_is_compact_utf8_json() -> None:
    payload = {"jid": "j", "args": [1, {"a": "é"}], "kwargs": {}}
    encoded = wire.encode(payload)
    assert isinstance(encoded, bytes)
    assert encoded == b'{"jid":"j","args":[1,{"a":"\\u00e9"}],"kwargs":{}}'
    assert json.loads(encoded) == payload


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_encode_refuses_non_finite_floats(bad: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        wire.encode({"args": [bad]})


def test_build_encode_decode_round_trip() -> None:
    payload = wire.build(JOB, (1, (2, 3)), {"k": "v"}, queue="q", retry=2)
    decoded = wire.decode(wire.encode(payload))
    assert decoded == {**payload, "args": [1, [2, 3]]}


# -- decode -------------------------------------------------------------------


def test_decode_valid_bytes_and_str() -> None:
    payload = valid_payload(kwargs={"a": 1})
    assert wire.decode(raw(payload)) == payload
    assert wire.decode(json.dumps(payload)) == payload


def test_decode_defaults_kwargs_to_empty_object() -> None:
    assert wire.decode(raw(valid_payload()))["kwargs"] == {}


def test_decode_keeps_unknown_fields() -> None:
    payload = valid_payload(trace_id="abc", nested={"x": [1]}, retry_count=3)
    decoded = wire.decode(raw(payload))
    assert decoded["trace_id"] == "abc"
    assert decoded["nested"] == {"x": [1]}
    assert decoded["retry_count"] == 3


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", "payload is not JSON: "),
        (b'{"jid": ', "payload is not JSON: "),
        (b"", "payload is not JSON: "),
        (b'{"jid":"\xff\xfe"}', "payload is not JSON: "),
        (b"\x80\x81\x82", "payload is not JSON: "),
        (b"[1, 2]", "payload is a JSON list, not an object"),
        (b'"text"', "payload is a JSON str, not an object"),
        (b"42", "payload is a JSON int, not an object"),
        (b"null", "payload is a JSON NoneType, not an object"),
    ],
)
def test_decode_refuses_non_objects(data: bytes, reason: str) -> None:
    with pytest.raises(wire.BadPayload) as info:
        wire.decode(data)
    assert str(info.value).startswith(reason)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("field", sorted(wire.REQUIRED_FIELDS))
def test_decode_requires_each_field(field: str) -> None:
    payload = valid_payload()
    del payload[field]
    with pytest.raises(wire.BadPayload) as info:
        wire.decode(raw(payload))
    assert str(info.value) == f"payload has no {field!r} field"


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("jid", 123, "str"),
        ("jid", None, "str"),
        ("job", ["x"], "str"),
        ("args", {"a": 1}, "list"),
        ("args", "1,2", "list"),
        ("queue", 7, "str"),
        ("queue", True, "str"),
    ],
)
def test_decode_checks_field_types(field: str, value: object, kind: str) -> None:
    with pytest.raises(wire.BadPayload) as info:
        wire.decode(raw(valid_payload(**{field: value})))
    assert str(info.value) == f"payload field {field!r} is not a {kind}"


@pytest.mark.parametrize("kwargs", [[1, 2], "k=v", 3, None])
def test_decode_refuses_kwargs_that_is_not_an_object(kwargs: object) -> None:
    with pytest.raises(wire.BadPayload) as info:
        wire.decode(raw(valid_payload(kwargs=kwargs)))
    assert str(info.value) == "payload field 'kwargs' is not an object"


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_decode_refuses_numbers_that_encode_cannot_write(number: bytes) -> None:
    data = b'{"jid":"a","job":"j","args":[' + number + b'],"queue":"q"}'
    with pytest.raises(wire.BadPayload):
        wire.decode(data)


# -- buried -------------------------------------------------------------------


def test_buried_object_keeps_fields_and_adds_death() -> None:
    payload = {"jid": "j1", "job": "gone.job", "args": [1], "queue": "q", "custom": {"x": 1}}
    before = time.time()
    entry = wire.buried(raw(payload), "no job registered as 'gone.job'", "q")
    after = time.time()
    for key, value in payload.items():
        assert entry[key] == value
    assert entry["dead_reason"] == "no job registered as 'gone.job'"
    assert entry["error_class"] == "BadPayload"
    assert entry["error_message"] == "no job registered as 'gone.job'"
    assert before <= entry["died_at"] <= after
    assert "raw" not in entry
    json.loads(wire.encode(entry))


def test_buried_object_without_jid_gets_one() -> None:
    entry = wire.buried(b'{"job":"x"}', "payload has no 'jid' field", "q")
    assert re.fullmatch(r"[0-9a-f]{24}", entry["jid"])
    assert entry["job"] == "x"


@pytest.mark.parametrize("data", [b"garbage{", b"[1,2,3]", b'"a string"'])
def test_buried_non_object_wraps_raw_text(data: bytes) -> None:
    entry = wire.buried(data, "payload is not JSON", "mail")
    assert entry["raw"] == data.decode()
    assert "raw_hex" not in entry
    assert entry["job"] is None
    assert entry["queue"] == "mail"
    assert re.fullmatch(r"[0-9a-f]{24}", entry["jid"])
    assert entry["dead_reason"] == "payload is not JSON"
    assert entry["error_class"] == "BadPayload"
    assert isinstance(entry["died_at"], float)
    json.loads(wire.encode(entry))


def test_buried_non_utf8_adds_raw_hex() -> None:
    data = b"\xff\xfe{bad"
    entry = wire.buried(data, "payload is not JSON", "q")
    assert entry["raw_hex"] == "fffe7b626164"
    assert bytes.fromhex(entry["raw_hex"]) == data
    assert entry["raw"] == "\\xff\\xfe{bad"
    json.loads(wire.encode(entry))


def test_buried_entry_is_always_encodable() -> None:
    entry = wire.buried(b'{"jid":"a","job":"j","args":[NaN]}', "payload has no 'queue' field", "q")
    wire.encode(entry)
