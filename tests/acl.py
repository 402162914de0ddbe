"""The Redis ACL rule that README.md documents, for tests that run as that user.

Tests read the ``ACL SETUSER`` line from the README itself, so what users
copy is exactly what the tests prove (running jobmaster as that user, and
what the user is refused).
"""

from __future__ import annotations

from pathlib import Path

import redis

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "### Redis ACL: a user limited to jobmaster's keys"
DEFAULT_PREFIX = "jobmaster:{jobmaster}:"
PLACEHOLDER = ">PASSWORD"


def documented_rule() -> str:
    """The first ``ACL SETUSER`` line of the README's ACL subsection."""
    text = README.read_text()
    assert SECTION in text, f"README.md lost the subsection {SECTION!r}"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in body.splitlines() if line.startswith("ACL SETUSER ")]
    assert lines, "no ACL SETUSER line in the README's ACL subsection"
    return lines[0]


def setuser_arguments(user: str, password: str, namespace: str = "jobmaster") -> list[str]:
    """The README's rule for ``namespace``, as arguments of one ACL SETUSER call.

    The README says how the rule changes with the namespace: both patterns
    take its prefix. That substitution is done here, as a user would.
    """
    words = documented_rule().split()
    assert words[:3] == ["ACL", "SETUSER", "jobmaster"], words[:3]
    assert words.count(PLACEHOLDER) == 1
    prefix = f"{namespace}:{{{namespace}}}:"
    rule = [
        f">{password}" if word == PLACEHOLDER else word.replace(DEFAULT_PREFIX, prefix)
        for word in words[3:]
    ]
    return ["ACL", "SETUSER", user, *rule]


def create_user(admin: redis.Redis, user: str, password: str, namespace: str = "jobmaster") -> None:
    admin.execute_command(*setuser_arguments(user, password, namespace))


def acl_log(admin: redis.Redis) -> list[dict[str, object]]:
    """Every denial Redis logged (reason, command, object, username)."""
    entries: list[dict[str, object]] = admin.acl_log()
    return entries
