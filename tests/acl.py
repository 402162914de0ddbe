"""The Redis ACL rule that docs/redis-deployment.md documents, for tests that run as that user.

Tests read the ``ACL SETUSER`` line from that page itself, so what users
copy is exactly what the tests prove (running jobmaster as that user, and
what the user is refused).
"""

from __future__ import annotations

from pathlib import Path

import redis

DOC = Path(__file__).resolve().parents[1] / "docs" / "redis-deployment.md"
SECTION = "## Redis ACL: a user limited to jobmaster's keys"
DEFAULT_PREFIX = "jobmaster:{jobmaster}:"
PLACEHOLDER = ">PASSWORD"


PRODUCER = "jobmaster-producer"  # the documented second user: enqueues, never controls


def documented_rule(rule: str = "jobmaster") -> str:
    """The ACL section's ``ACL SETUSER`` line for the user ``rule``."""
    text = DOC.read_text()
    assert SECTION in text, f"docs/redis-deployment.md lost the section {SECTION!r}"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in body.splitlines() if line.startswith(f"ACL SETUSER {rule} ")]
    assert lines, f"no ACL SETUSER {rule} line in the ACL section of {DOC.name}"
    return lines[0]


def setuser_arguments(
    user: str, password: str, namespace: str = "jobmaster", rule: str = "jobmaster"
) -> list[str]:
    """The documented rule ``rule`` for ``namespace``, as arguments of one ACL SETUSER call.

    The page says how the rule changes with the namespace: every pattern
    takes its prefix. That substitution is done here, as a user would.
    """
    words = documented_rule(rule).split()
    assert words[:3] == ["ACL", "SETUSER", rule], words[:3]
    assert words.count(PLACEHOLDER) == 1
    prefix = f"{namespace}:{{{namespace}}}:"
    rule = [
        f">{password}" if word == PLACEHOLDER else word.replace(DEFAULT_PREFIX, prefix)
        for word in words[3:]
    ]
    return ["ACL", "SETUSER", user, *rule]


def create_user(
    admin: redis.Redis,
    user: str,
    password: str,
    namespace: str = "jobmaster",
    rule: str = "jobmaster",
) -> None:
    admin.execute_command(*setuser_arguments(user, password, namespace, rule))


def acl_log(admin: redis.Redis) -> list[dict[str, object]]:
    """Every denial Redis logged (reason, command, object, username)."""
    entries: list[dict[str, object]] = admin.acl_log()
    return entries
