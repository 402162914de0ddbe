"""The master's side of the job counts: every child's last report, summed.

A report is cumulative since its child started, so the master keeps only
the latest one per live child. When a child is reaped, its last report is
folded into ``retired`` (the counts of the gone): the totals never go
backwards while children come and go, which is what a Prometheus counter
must do. Counters restart from zero only when the master does.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobmaster.metrics.series import Key, Report, Series


class JobTotals:
    def __init__(self) -> None:
        self.live: dict[int, Report] = {}  # pid -> its last report
        self.retired: dict[Key, Series] = {}

    def update(self, report: Report) -> None:
        self.live[report.pid] = report

    def retire(self, pid: int) -> None:
        """The child is gone: its last counts stay in the totals for good."""
        report = self.live.pop(pid, None)
        if report is not None:
            _fold(self.retired, report.jobs.items())

    def series(self) -> dict[Key, Series]:
        """Every (job, queue) ever counted under this master, summed over its children."""
        total = {key: series.copy() for key, series in self.retired.items()}
        for report in self.live.values():
            _fold(total, report.jobs.items())
        return total

    @property
    def busy(self) -> int:
        """Threads running a job now, by each live child's last report."""
        return sum(report.busy for report in self.live.values())

    @property
    def threads(self) -> int:
        return sum(report.threads for report in self.live.values())


def _fold(into: dict[Key, Series], items: Iterable[tuple[Key, Series]]) -> None:
    for key, series in items:
        if key in into:
            into[key].add(series)
        else:
            into[key] = series.copy()
