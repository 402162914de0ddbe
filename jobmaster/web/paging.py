"""Page numbers from the query string, and what a pager needs to draw itself."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

PER_PAGE = 25


@dataclass(frozen=True)
class Pager:
    number: int  # 1-based
    per_page: int
    total: int

    @property
    def start(self) -> int:
        return (self.number - 1) * self.per_page

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def previous(self) -> int | None:
        return self.number - 1 if self.number > 1 else None

    @property
    def next(self) -> int | None:
        return self.number + 1 if self.number < self.pages else None


def pager(request: Request, total: int, per_page: int = PER_PAGE) -> Pager:
    """The page asked for, kept within the pages there are."""
    try:
        number = int(request.query_params.get("page", "1"))
    except ValueError:
        number = 1
    last = max(1, -(-total // per_page))
    return Pager(min(max(1, number), last), per_page, total)
