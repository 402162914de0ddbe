"""The readable side of bench/peers.py: ratios, and the table on stderr.

Kept apart from the runner so each file holds one job: peers.py starts
things and collects the drivers' JSON; this turns that JSON into a column
per system (``--no-table`` skips it; the JSON on stdout holds everything).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any


# -- figures ----------------------------------------------------------------------
def figure(results: dict[str, Any], peer: str, measure: str, *path: str) -> Any:
    """A value from one system's measure, or None when it is missing or failed."""
    value: Any = results.get(peer, {}).get("measures", {}).get(measure)
    if not value or not value.get("ok"):
        return None
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


RATIO_FIGURES = {
    "throughput_first_to_last": ("throughput", "first_to_last_jobs_per_s"),
    "throughput_from_start": ("throughput", "from_start_jobs_per_s"),
    "enqueue_single": ("enqueue", "single", "jobs_per_s"),
}


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """jobmaster's figure over the fastest peer's, for each throughput and enqueue rate."""
    out: dict[str, Any] = {}
    for name, (measure, *path) in RATIO_FIGURES.items():
        ours = figure(results, "jobmaster", measure, *path)
        theirs = {p: figure(results, p, measure, *path) for p in results if p != "jobmaster"}
        theirs = {p: v for p, v in theirs.items() if v}
        if ours and theirs:
            best = max(theirs, key=lambda p: theirs[p])
            out[name] = {"ratio": ours / theirs[best], "fastest_peer": best}
    return out


def rate_cell(results: dict[str, Any], peer: str, measure: str, *path: str) -> str:
    value = figure(results, peer, measure, *path)
    if value is not None:
        return f"{value:,.0f}"
    if measure == "throughput" and (
        partial := figure(results, peer, measure, "partial_jobs_per_s")
    ):
        return f"~{partial:,.0f} partial"
    return status_cell(results, peer, measure)


def status_cell(results: dict[str, Any], peer: str, measure: str) -> str:
    """Why a cell is empty: not installed, not run, failed, or no such API."""
    system = results.get(peer, {})
    if not system.get("measures"):
        status = str(system.get("install", {}).get("status", "-"))
        return "install failed" if status.startswith("install") else status.partition(" (")[0]
    out = system["measures"].get(measure)
    if out is None:
        return "-"
    return "n/a" if out.get("ok") else "error"


def failover_cells(results: dict[str, Any], peer: str) -> tuple[str, str]:
    """(runs again: median ms or the outcomes, killed process replaced: median ms)."""
    rounds = figure(results, peer, "failover", "rounds")
    if not rounds:
        cell = status_cell(results, peer, "failover")
        return cell, cell
    restarts = [r["restart_ms"] for r in rounds if r["restart_ms"] is not None]
    if len(restarts) == len(rounds):
        again = f"{statistics.median(restarts):,.0f} ms"
    else:
        kinds: dict[str, int] = {}
        for r in rounds:
            kind = r["outcome"].split()[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        again = ", ".join(f"{k} {n}/{len(rounds)}" for k, n in kinds.items())
    replaced = [r["replacement_ms"] for r in rounds if r["replacement_ms"] is not None]
    if replaced:
        return again, f"{statistics.median(replaced):,.0f} ms"
    return again, "n/a" if all(r["depth"] != 1 for r in rounds) else "no"


def shutdown_cells(results: dict[str, Any], peer: str) -> tuple[str, str, str]:
    """(idle exit s, busy exit s, what became of the 2 running jobs)."""
    out = figure(results, peer, "shutdown")
    if out is None:
        cell = status_cell(results, peer, "shutdown")
        return cell, cell, cell

    def seconds(stop: dict[str, Any]) -> str:
        return "killed" if stop["exit_s"] is None else f"{stop['exit_s']:.2f} s"

    kinds: dict[str, int] = {}
    for job in out["busy"]["jobs"]:
        kind = job["outcome"].split()[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    jobs = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return seconds(out["idle"]), seconds(out["busy"]), jobs


def table_rows(results: dict[str, Any], systems: list[str]) -> list[tuple[str, list[str]]]:
    def row(label: str, measure: str, *path: str) -> tuple[str, list[str]]:
        return label, [rate_cell(results, p, measure, *path) for p in systems]

    failover = [failover_cells(results, p) for p in systems]
    shutdown = [shutdown_cells(results, p) for p in systems]
    calls = [figure(results, p, "throughput", "redis_calls_per_job") for p in systems]
    return [
        row("enqueue single (jobs/s)", "enqueue", "single", "jobs_per_s"),
        row("enqueue bulk (jobs/s)", "enqueue", "bulk", "jobs_per_s"),
        row("throughput first→last (jobs/s)", "throughput", "first_to_last_jobs_per_s"),
        row("throughput from start (jobs/s)", "throughput", "from_start_jobs_per_s"),
        ("Redis commands per job", [f"{c:.1f}" if c else "-" for c in calls]),
        ("failover: job runs again", [f[0] for f in failover]),
        ("failover: process replaced", [f[1] for f in failover]),
        ("shutdown idle: exit", [s[0] for s in shutdown]),
        ("shutdown 2 jobs: exit", [s[1] for s in shutdown]),
        ("shutdown 2 jobs: the jobs", [s[2] for s in shutdown]),
    ]


def print_table(report: dict[str, Any]) -> None:
    out, results = sys.stderr, report["systems"]
    systems = list(results)
    m, c = report["machine"], report["config"]
    print(
        f"\npython {m['python']}  redis {m['redis']}  nproc {m['nproc']}  "
        f"jobs {c['jobs']:,}  enqueue jobs {c['enqueue_jobs']:,}  2 processes each",
        file=out,
    )
    width = max(15, *(len(p) + 2 for p in systems))
    print(f"\n{'':<32}" + "".join(f"{p:>{width}}" for p in systems), file=out)
    for label, cells in table_rows(results, systems):
        print(f"{label:<32}" + "".join(f"{cell:>{width}}" for cell in cells), file=out)
    for name, r in report["ratios"].items():
        print(f"jobmaster / {r['fastest_peer']} ({name}): {r['ratio']:.2f}x", file=out)
    print_details(results, out)


def print_details(results: dict[str, Any], out: Any) -> None:
    """Versions and the exact commands, under the table."""
    print("", file=out)
    for peer, system in results.items():
        measures = system["measures"]
        any_ok = next((v for v in measures.values() if v.get("ok")), None)
        if any_ok is None:
            output = system["install"].get("output", "").strip().splitlines()
            print(f"{peer}: {system['install'].get('status')}", file=out)
            if output:
                print(f"    {output[-1]}", file=out)
            continue
        versions = " ".join(f"{k} {v}" for k, v in any_ok["versions"].items())
        command = next((v["command"] for v in measures.values() if v.get("command")), None)
        print(f"{peer} ({versions}): {' '.join(command or [])}", file=out)
        print(f"    enqueue: {any_ok['single_api']}; bulk: {any_ok['bulk_api'] or 'n/a'}", file=out)
        if any_ok["notes"]:
            print(f"    {any_ok['notes']}", file=out)
        for measure, value in measures.items():
            if not value.get("ok"):
                print(f"    {measure} FAILED: {value.get('error')}", file=out)
    print("", file=out)
