"""Which environment variable sets a value: one rule for the config and the producer.

The workers read settings through config.py and a producer's default
client (``job.enqueue`` without ``configure``) read ``JOBMASTER_REDIS_URL``
and ``REDIS_URL`` itself, with its own rule: a blank ``JOBMASTER_REDIS_URL=" "``
(a Compose file's ``VAR= ``) hid ``REDIS_URL`` from the producer but not
from the workers, so the two could talk to different Redis servers. Both,
and the config's error messages that name where a value came from, and a
producer's ``JOBMASTER_SECRET_KEY`` (crypto.py) now ask ``env_value``: the
first variable of a setting's list set to a non-blank value wins.

Precedence, strongest first: the CLI option or ``configure()`` argument,
then these variables, then the config file (workers only), then the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from jobmaster.redis_target import DEFAULT_URL

# JOBMASTER_REDIS_URL must be able to override REDIS_URL, which Heroku and
# most platforms set for their own Redis.
REDIS_URL_VARS = ("JOBMASTER_REDIS_URL", "REDIS_URL")


def env_value(names: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(name, value)`` of the first of ``names`` set in ``env`` (``os.environ``),
    or None. An empty or blank variable is unset, not an invalid value."""
    environment = os.environ if env is None else env
    for name in names:
        value = environment.get(name, "")
        if value.strip():
            return name, value
    return None


def redis_url(env: Mapping[str, str] | None = None) -> str:
    """The producer's Redis when nothing else names one: the variables, else local."""
    found = env_value(REDIS_URL_VARS, env)
    return found[1] if found else DEFAULT_URL
