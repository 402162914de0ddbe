"""``@frozen``: a dataclass frozen for the type checker, built without frozen's cost.

A frozen dataclass's ``__init__`` sets each field with ``object.__setattr__``,
a call per field: for the records made for every job (FINISH's arguments, 27
fields; a job's outcome, 17; the fetched job, 10) that cost about 7 µs of a
no-op job's worker CPU (~250 µs; bench/throughput.py), more than any other
part of the job's way through the worker. A class decorated here is an
ordinary dataclass with slots at run time (about 0.06 µs a field), and
frozen to mypy (``dataclass_transform(frozen_default=True)``): an assignment to
a field fails the type check, run strict in CI, as it would for a frozen
dataclass. What it does not give: a ``__hash__`` (nothing hashes these; each
holds a dict or list anyway), nor a FrozenInstanceError at run time.

Use it only for a record made per job on the hot path; elsewhere,
``@dataclass(frozen=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # only the type checker reads it; typing has it from Python 3.11 only

    def dataclass_transform(**_: Any) -> Any:
        return lambda decorated: decorated


@dataclass_transform(frozen_default=True)
def frozen(cls: type[T]) -> type[T]:
    return dataclass(slots=True)(cls)
