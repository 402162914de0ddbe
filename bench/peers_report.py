"""The readable side of bench/peers.py: medians, the issue's targets, the table.

Kept apart from the runner so each file holds one job: peers.py starts
things and collects the drivers' JSON (``systems[name]["runs"]``, one dict
of measures per run); this turns it into medians over the runs, the ratios
of jobmaster to the peers against the targets of issue 25, and a column per
system on stderr (``--no-table`` skips it; the JSON on stdout holds
everything, every run's values included).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# figure name -> (measure, path in the driver's JSON)
FIGURES: dict[str, tuple[str, ...]] = {
    "enqueue_single": ("enqueue", "single", "jobs_per_s"),
    "ping_floor": ("enqueue", "ping", "per_s"),
    "bulk": ("bulk", "bulk", "jobs_per_s"),
    "producers": ("producers", "concurrent", "jobs_per_s"),
    "throughput": ("throughput", "first_to_last_jobs_per_s"),
    "throughput_from_start": ("throughput", "from_start_jobs_per_s"),
    "worker_cpu_us": ("throughput", "worker_cpu_us_per_job"),
    "redis_cpu_us": ("throughput", "redis_cpu_us_per_job"),
    "calls_per_job": ("throughput", "redis_calls_per_job"),
    "calls_enqueue": ("throughput", "redis_calls_enqueue_per_job"),
    "calls_drain": ("throughput", "redis_calls_drain_per_job"),
}


# -- figures ----------------------------------------------------------------------
def measure_out(system: dict[str, Any], measure: str, run: int = 0) -> dict[str, Any] | None:
    """One run's output of one measure, or None when it was not run or failed."""
    runs = system.get("runs", [])
    value = runs[run].get(measure) if run < len(runs) else None
    return value if value and value.get("ok") else None


def dig(value: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


def values(system: dict[str, Any], figure: str) -> list[float]:
    """A figure's value in each run where it was measured."""
    measure, *path = FIGURES[figure]
    out = []
    for run in range(len(system.get("runs", []))):
        value = dig(measure_out(system, measure, run), tuple(path))
        if isinstance(value, int | float):
            out.append(float(value))
    return out


def medians(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, system in results.items():
        out[name] = {}
        for figure in FIGURES:
            found = values(system, figure)
            if found:
                out[name][figure] = {"median": statistics.median(found), "runs": found}
        worker, server = out[name].get("worker_cpu_us"), out[name].get("redis_cpu_us")
        if worker and server and len(worker["runs"]) == len(server["runs"]):
            both = [a + b for a, b in zip(worker["runs"], server["runs"], strict=True)]
            out[name]["total_cpu_us"] = {"median": statistics.median(both), "runs": both}
    return out


# -- targets ----------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """One of issue 25's targets: jobmaster's median against the best peer's."""

    label: str
    figure: str
    bound: float  # the ratio to reach
    higher_is_better: bool = True
    against: str | None = None  # one named peer instead of the best one
    log_level: str | None = None  # only the jobmaster column at this level


TARGETS = (
    Target("throughput at warning", "throughput", 2.0, log_level="warning"),
    Target("throughput at defaults", "throughput", 1.5, log_level="info"),
    Target("worker CPU per job", "worker_cpu_us", 0.5, higher_is_better=False),
    Target("Redis CPU per job", "redis_cpu_us", 0.5, higher_is_better=False),
    Target("Redis commands per job", "calls_per_job", 1.0, False, against="dramatiq"),
    Target("single enqueue", "enqueue_single", 1.2),
    Target("16 producers", "producers", 3.0),
)
BULK_TARGET = 50_000.0  # push_bulk jobs/s, an absolute bound
PING_SHARE = 0.9  # single enqueue: or this share of the PING floor


def is_jobmaster(name: str) -> bool:
    return name == "jobmaster" or name.startswith("jobmaster@")


def best_peer(
    table: dict[str, dict[str, Any]], figure: str, higher: bool, against: str | None
) -> tuple[str, float] | None:
    theirs = {
        n: f[figure]["median"] for n, f in table.items() if not is_jobmaster(n) and figure in f
    }
    if against is not None:
        theirs = {n: v for n, v in theirs.items() if n == against}
    if not theirs:
        return None
    pick = max if higher else min
    name = pick(theirs, key=lambda n: theirs[n])
    return name, theirs[name]


def judge(results: dict[str, Any], table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target, for each jobmaster column it applies to: met or missed."""
    out: list[dict[str, Any]] = []
    ours = [n for n in results if is_jobmaster(n)]
    for target in TARGETS:
        best = best_peer(table, target.figure, target.higher_is_better, target.against)
        for name in ours:
            if target.log_level and results[name].get("log_level") != target.log_level:
                continue
            mine = table[name].get(target.figure, {}).get("median")
            if mine is None or best is None or not best[1]:
                continue
            ratio = mine / best[1]
            met = ratio >= target.bound if target.higher_is_better else ratio <= target.bound
            entry = {
                "target": target.label,
                "jobmaster": name,
                "value": mine,
                "against": best[0],
                "their_value": best[1],
                "ratio": ratio,
                "bound": f"{'>=' if target.higher_is_better else '<='} {target.bound:g}x",
                "met": met,
            }
            if target.figure == "enqueue_single":
                add_ping_floor(entry, table[name])
            out.append(entry)
    for name in ours:
        bulk = table[name].get("bulk", {}).get("median")
        if bulk is not None:
            out.append(
                {
                    "target": "push_bulk",
                    "jobmaster": name,
                    "value": bulk,
                    "bound": f">= {BULK_TARGET:,.0f} jobs/s",
                    "met": bulk >= BULK_TARGET,
                }
            )
    return out


def add_ping_floor(entry: dict[str, Any], mine: dict[str, Any]) -> None:
    """Single enqueue is met at 1.2x the fastest peer, or at 90 % of the PING
    floor of the same venv and run when that is the lower bar."""
    ping = mine.get("ping_floor", {}).get("median")
    if not ping:
        return
    entry["ping_floor"] = ping
    entry["of_ping_floor"] = entry["value"] / ping
    entry["met"] = entry["met"] or entry["of_ping_floor"] >= PING_SHARE
    entry["bound"] += f" or >= {PING_SHARE:.0%} of PING"


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    table = medians(results)
    return {"medians": table, "targets": judge(results, table)}


# -- the table --------------------------------------------------------------------
def status_cell(system: dict[str, Any], measure: str, run: int = 0) -> str:
    """Why a cell is empty: not installed, not run, failed, or no such API."""
    runs = system.get("runs", [])
    if not runs or not any(runs):
        status = str(system.get("install", {}).get("status", "-"))
        return "install failed" if status.startswith("install") else status.partition(" (")[0]
    out = runs[run].get(measure) if run < len(runs) else None
    if out is None:
        return "-"
    return "n/a" if out.get("ok") else "error"


def number_cell(
    system: dict[str, Any], table: dict[str, Any], figure: str, fmt: str = "{:,.0f}"
) -> str:
    found = table.get(figure)
    if found is not None:
        return fmt.format(found["median"])
    measure = FIGURES.get(figure, ("throughput",))[0]
    if figure.startswith("throughput"):
        partial = [
            dig(measure_out(system, measure, r), ("partial_jobs_per_s",))
            for r in range(len(system.get("runs", [])))
        ]
        if partial := [p for p in partial if p]:
            rate = statistics.median(partial)
            return f"~{rate:,.0f} partial" if figure == "throughput" else "not drained"
    if figure == "producers":
        out = measure_out(system, measure)
        errors = dig(out, ("concurrent", "errors"))
        if out is not None and (errors or out.get("backlog") != out.get("backlog_expected")):
            return f"unsafe ({errors} err)" if errors else "jobs missing"
    return status_cell(system, measure)


def failover_cells(system: dict[str, Any]) -> tuple[str, str]:
    """(runs again: median ms or the outcomes, killed process replaced: median ms)."""
    rounds = dig(measure_out(system, "failover"), ("rounds",))
    if not rounds:
        cell = status_cell(system, "failover")
        return cell, cell
    restarts = [r["restart_ms"] for r in rounds if r.get("restart_ms") is not None]
    if len(restarts) == len(rounds):
        again = f"{statistics.median(restarts):,.0f} ms"
    else:
        kinds: dict[str, int] = {}
        for r in rounds:
            kind = r["outcome"].split()[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        again = ", ".join(f"{k} {n}/{len(rounds)}" for k, n in kinds.items())
    replaced = [r["replacement_ms"] for r in rounds if r.get("replacement_ms") is not None]
    if replaced:
        return again, f"{statistics.median(replaced):,.0f} ms"
    measured = [r for r in rounds if "depth" in r]  # the rounds that got to the kill
    if not measured:
        return again, "error"
    return again, "n/a" if all(r["depth"] != 1 for r in measured) else "no"


def shutdown_cells(system: dict[str, Any]) -> tuple[str, str, str]:
    """(idle exit s, busy exit s, what became of the 2 running jobs)."""
    out = measure_out(system, "shutdown")
    if out is None:
        cell = status_cell(system, "shutdown")
        return cell, cell, cell

    def seconds(stop: dict[str, Any]) -> str:
        return "killed" if stop["exit_s"] is None else f"{stop['exit_s']:.2f} s"

    kinds: dict[str, int] = {}
    for job in out["busy"]["jobs"]:
        kind = job["outcome"].split()[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    jobs = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return seconds(out["idle"]), seconds(out["busy"]), jobs


ROWS: tuple[tuple[str, str, str], ...] = (
    ("single enqueue (jobs/s)", "enqueue_single", "{:,.0f}"),
    ("PING floor, same run (calls/s)", "ping_floor", "{:,.0f}"),
    ("16 producers (jobs/s)", "producers", "{:,.0f}"),
    ("bulk enqueue (jobs/s)", "bulk", "{:,.0f}"),
    ("throughput first→last (jobs/s)", "throughput", "{:,.0f}"),
    ("throughput from start (jobs/s)", "throughput_from_start", "{:,.0f}"),
    ("worker tree CPU per job (µs)", "worker_cpu_us", "{:,.0f}"),
    ("Redis CPU per job (µs)", "redis_cpu_us", "{:,.0f}"),
    ("worker + Redis CPU per job (µs)", "total_cpu_us", "{:,.0f}"),
    ("Redis commands per job", "calls_per_job", "{:.1f}"),
    ("  of which enqueue", "calls_enqueue", "{:.1f}"),
    ("  of which drain", "calls_drain", "{:.1f}"),
)


def table_rows(report: dict[str, Any]) -> list[tuple[str, list[str]]]:
    results, table = report["systems"], report["medians"]
    names = list(results)
    rows: list[tuple[str, list[str]]] = []
    for label, figure, fmt in ROWS:
        rows.append((label, [number_cell(results[n], table[n], figure, fmt) for n in names]))
    failover = [failover_cells(results[n]) for n in names]
    shutdown = [shutdown_cells(results[n]) for n in names]
    cells: list[tuple[str, Callable[[int], str]]] = [
        ("failover: job runs again", lambda i: failover[i][0]),
        ("failover: process replaced", lambda i: failover[i][1]),
        ("shutdown idle: exit", lambda i: shutdown[i][0]),
        ("shutdown 2 jobs: exit", lambda i: shutdown[i][1]),
        ("shutdown 2 jobs: the jobs", lambda i: shutdown[i][2]),
    ]
    for label, cell in cells:
        rows.append((label, [cell(i) for i in range(len(names))]))
    return rows


def target_line(t: dict[str, Any]) -> str:
    verdict = "MET" if t["met"] else "missed"
    if "against" not in t:
        head = f"  {t['target']} ({t['jobmaster']}): {t['value']:,.0f} jobs/s"
        return f"{head}, {t['bound']}: {verdict}"
    line = (
        f"  {t['target']} ({t['jobmaster']}): {t['ratio']:.2f}x {t['against']} "
        f"({t['value']:,.1f} vs {t['their_value']:,.1f}), target {t['bound']}"
    )
    if "of_ping_floor" in t:
        line += f"; {t['of_ping_floor']:.0%} of PING ({t['ping_floor']:,.0f}/s)"
    return f"{line}: {verdict}"


def print_table(report: dict[str, Any]) -> None:
    out, results = sys.stderr, report["systems"]
    names = list(results)
    m, c = report["machine"], report["config"]
    print(
        f"\npython {m['python']}  redis {m['redis']}  nproc {m['nproc']}  "
        f"runs {c['runs']} (medians)  jobs {c['jobs']:,}  enqueue jobs {c['enqueue_jobs']:,}  "
        f"producers {c['producers']} x {c['producer_jobs'] // c['producers']:,}  "
        f"bulk {c['bulk_jobs']:,}  2 worker processes each",
        file=out,
    )
    width = max(12, *(len(n) + 2 for n in names))
    print(f"\n{'':<33}" + "".join(f"{n:>{width}}" for n in names), file=out)
    for label, cells in table_rows(report):
        print(f"{label:<33}" + "".join(f"{cell:>{width}}" for cell in cells), file=out)
    print("\nIssue 25's targets (medians; the machine may be shared):", file=out)
    for target in report["targets"]:
        print(target_line(target), file=out)
    print_details(results, out)


def print_details(results: dict[str, Any], out: Any) -> None:
    """Versions and the exact commands, under the table."""
    print("", file=out)
    for name, system in results.items():
        runs = [m for run in system.get("runs", []) for m in run.values()]
        any_ok = next((v for v in runs if v.get("ok")), None)
        if any_ok is None:
            output = system["install"].get("output", "").strip().splitlines()
            print(f"{name}: {system['install'].get('status')}", file=out)
            if output:
                print(f"    {output[-1]}", file=out)
            continue
        versions = " ".join(f"{k} {v}" for k, v in any_ok["versions"].items())
        command = next((v["command"] for v in runs if v.get("command")), None)
        print(f"{name} ({versions}): {' '.join(command or [])}", file=out)
        print(
            f"    enqueue: {any_ok['single_api']}; bulk: {any_ok['bulk_api'] or 'n/a'}; "
            f"concurrent: {any_ok.get('concurrent_api')}",
            file=out,
        )
        if any_ok["notes"]:
            print(f"    {any_ok['notes']}", file=out)
        for index, run in enumerate(system.get("runs", [])):
            for measure, value in run.items():
                if not value.get("ok"):
                    print(f"    run {index + 1} {measure} FAILED: {value.get('error')}", file=out)
            for r in dig(run.get("failover"), ("rounds",)) or []:
                if "error" in r:
                    first_line = r["error"].splitlines()[0]
                    print(f"    failover round {r['round']} FAILED: {first_line}", file=out)
    print("", file=out)
