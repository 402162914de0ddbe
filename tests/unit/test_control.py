"""The one parser of remote commands (control.py), for the master and its children.

No Redis here: ``parse`` takes what CONTROL_POP returns (each entry's length
and first bytes) and must act only on exact commands, whatever else a
forger pushed, and log each ignored entry as one short line.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobmaster import control

pytestmark = pytest.mark.timeout(30)


def reply(*entries: bytes) -> list[object]:
    """What CONTROL_POP returns for these entries."""
    return [x for raw in entries for x in (len(raw), raw[: control.ENTRY_BYTES])]


def test_only_exact_commands_are_acted_on_in_order() -> None:
    entries = [b"quiet", b"QUIET", b"stop ", b"resume", b"stop" + b"\x00" * 100, b"stop"]
    assert control.parse(reply(*entries), "master") == ["quiet", "resume", "stop"]


def test_ignored_entries_are_logged_short_escaped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forged = b"quiet\n2026-12-01 05:00:00 INFO jobmaster: forged line " + b"x" * 500
    with caplog.at_level(logging.WARNING, logger="jobmaster.control"):
        assert control.parse(reply(forged, *[b"\x1b[2J"] * 10), "child 2") == []
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == control.LOGGED + 1
    assert messages[-1] == "child 2: ignored 8 more unknown remote commands"
    assert f"({len(forged)} bytes)" in messages[0]
    assert all("\n" not in m and "\x1b" not in m and len(m) < 200 for m in messages)


def test_a_control_key_of_another_type_is_reported() -> None:
    assert control.parse([-1, b"string"], "master") == []


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.one_of(
        st.lists(st.one_of(st.integers(), st.binary(max_size=80), st.none(), st.text(max_size=8))),
        st.none(),
        st.binary(max_size=8),
        st.integers(),
    )
)
def test_any_reply_parses_to_commands_only(anything: object) -> None:
    assert set(control.parse(anything, "master")) <= set(control.COMMANDS)
