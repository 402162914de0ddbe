"""Hypothesis strategies shared by the fuzz tests, and the jobs they run.

The fuzz tests push what a careless (or hostile) producer could write: any
bytes, any JSON, payload-shaped objects with fields of the wrong type, Python
values that JSON cannot carry. Every test bounds its own ``max_examples`` and
turns the example database off, so a run takes the same, short time
everywhere and leaves nothing behind.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import threading
from typing import Any

from hypothesis import strategies as st

import jobmaster

# --- JSON values -------------------------------------------------------------------

# Text as JSON may carry it: any code point, lone surrogates included (json
# writes them as \ud800 escapes and reads them back; no UTF-8 form exists).
any_char = st.characters(exclude_categories=())
json_text = st.text(any_char, max_size=12)
json_keys = st.text(any_char, max_size=8)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**64 + 2),  # the 64-bit edges
    st.floats(allow_nan=False, allow_infinity=False),
    json_text,
)

json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=12,
)
json_lists = st.lists(json_values, max_size=4)
json_objects = st.dictionaries(json_keys, json_values, max_size=4)

# Smaller values for tests that draw many per example (a batch of payloads):
# drawing is what such a test spends most of its time on.
small_json = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_keys, inner, max_size=3),
    max_leaves=4,
)
small_json_lists = st.lists(small_json, max_size=3)
small_json_objects = st.dictionaries(json_keys, small_json, max_size=3)


def canonical(value: object) -> str:
    """One spelling per JSON value: ``True`` and ``1`` (equal in Python) differ here."""
    return json.dumps(value, sort_keys=True, allow_nan=False)


# --- Python values JSON cannot carry faithfully -----------------------------------


class Opaque:
    """An application object: what a producer passes by mistake instead of its id."""

    def __repr__(self) -> str:
        return "<Opaque>"


class ShortRepr(list[Any]):
    """A list that describes itself in a few words: hypothesis prints the
    arguments of a failing example, and printing ``[[[...]]]`` 3000 levels
    deep would itself exceed the recursion limit."""

    description = "a list"

    def __repr__(self) -> str:
        return f"<{self.description}>"


def deeply_nested(depth: int) -> list[Any]:
    """``[[[...]]]``: past the interpreter's recursion limit for json and for us."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    outer = ShortRepr([value])
    outer.description = f"a list nested {depth} deep"
    return outer


def self_containing() -> list[Any]:
    value = ShortRepr()
    value.description = "a list that contains itself"
    value.append(value)
    return value


non_json_scalars = st.one_of(
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.binary(max_size=8),
    st.builds(bytearray, st.binary(max_size=8)),
    st.builds(Opaque),
    st.complex_numbers(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(),
    st.dates(),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.builds(lambda digits: 10**digits, st.integers(4_300, 4_400)),  # past int->str limit
    st.just(decimal.Decimal("1.5")),
    st.just(datetime.timezone.utc),
    st.just(len),  # a function
    st.builds(deeply_nested, st.integers(2_000, 3_000)),
    st.builds(self_containing),
)

# Dict keys JSON would silently turn into strings (or refuse).
non_str_keys = st.one_of(
    st.integers(), st.none(), st.booleans(), st.floats(allow_nan=False), st.tuples(st.integers())
)

# Python values as producers pass them: JSON-ish ones (tuples too, which JSON
# turns into lists), values JSON cannot carry, and containers mixing both.
python_values = st.recursive(
    st.one_of(json_scalars, non_json_scalars),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(json_keys, inner, max_size=3),
        st.dictionaries(non_str_keys, inner, min_size=1, max_size=2),
    ),
    max_leaves=8,
)


# --- jobs ----------------------------------------------------------------------------

ACCEPT = "tests.fuzz.accept"
FAIL = "tests.fuzz.fail"

_calls: list[str] = []
_calls_lock = threading.Lock()


@jobmaster.job(name=ACCEPT, retry=0)
def accept(*args: Any, **kwargs: Any) -> None:
    """Takes any arguments and records them (canonical JSON), so a test can see
    that a payload ran with exactly the arguments it carried."""
    with _calls_lock:
        _calls.append(canonical({"args": list(args), "kwargs": kwargs}))


@jobmaster.job(name=FAIL, retry=0)
def fail(*args: Any, **kwargs: Any) -> None:
    """Always fails; ``retry=0`` sends it to the dead set at once."""
    raise ValueError("failing on purpose")


def calls() -> list[str]:
    """What ``accept`` has been called with so far (canonical JSON)."""
    with _calls_lock:
        return list(_calls)


def forget_calls() -> None:
    with _calls_lock:
        _calls.clear()
