"""What a queue name may be: one rule for the config, the job API and ``Client.push``.

There were three (settings.py refused ``:``, ``,`` and spaces, job.py
refused braces, ``Client.push`` refused nothing), so a producer could push
to a queue that no worker's config can name: the job then waited forever.
Refused, each for a failure it prevents:

- empty or not a string: the wire format's ``queue`` is a non-empty string;
- ``:`` reads as a weight (``"critical:3"``), ``,`` as a list (from the
  environment), whitespace is a typo that a worker would never match;
- ``{`` and ``}`` mark a Redis Cluster hash tag inside a key name: keys.py
  keeps the namespace's tag first, but a name that looks like a tag misleads
  whoever reads or scripts the keys by hand.
"""

from __future__ import annotations

_REFUSED = frozenset(":,{}")


def queue_name(name: object) -> str:
    """``name`` if it is a queue name; ``ValueError("must be ...")`` else.

    The message starts with "must be" so each caller names the value first
    ("queue names must be ...", "queue must be ...").
    """
    if (
        not isinstance(name, str)
        or not name
        or any(char in _REFUSED or char.isspace() for char in name)
    ):
        raise ValueError(f"must be non-empty, without ':', ',', braces or spaces, got {name!r}")
    return name
