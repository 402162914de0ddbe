"""The readable side of bench/async_peers.py: medians, issue 26's target, the table.

As bench/peers_report.py is to bench/peers.py (whose helpers it uses: a
cell's status, the versions and commands under the table): the runner
collects the drivers' JSON (``systems[name]["runs"]``, one dict of
workloads per run); this gives each figure's median over the runs, judges
each ``jobmaster-async`` column against the fastest other column, and
prints a column per system on stderr.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from peers_report import dig, print_details, status_cell

TIMED = ("sleep", "http")
# figure -> (path in the driver's JSON, row label, format)
FIGURES: dict[str, tuple[str, str, str]] = {
    "jobs_per_s": ("jobs_per_s", "jobs/s (first start → last end)", "{:,.0f}"),
    "polled_jobs_per_s": ("first_to_last_jobs_per_s", "jobs/s, polled (20 ms steps)", "{:,.0f}"),
    "startup_s": ("first_start_after_popen_s", "first job starts after (s)", "{:.2f}"),
    "worker_cpu_us": ("worker_cpu_us_per_job", "worker tree CPU per job (µs)", "{:,.0f}"),
    "redis_cpu_us": ("redis_cpu_us_per_job", "Redis CPU per job (µs)", "{:,.0f}"),
    "http_cpu_us": ("http_server_cpu_us_per_job", "HTTP server CPU per job (µs)", "{:,.0f}"),
    "calls_per_job": ("redis_calls_per_job", "Redis commands per job", "{:.1f}"),
    "calls_enqueue": ("redis_calls_enqueue_per_job", "  of which enqueue", "{:.1f}"),
    "calls_drain": ("redis_calls_drain_per_job", "  of which drain", "{:.1f}"),
}
TARGET = 2.0  # jobmaster async's jobs/s over the fastest other column's, on each workload


def is_async_jobmaster(name: str) -> bool:
    return name.startswith("jobmaster-async")


def ok_out(system: dict[str, Any], workload: str, run: int) -> dict[str, Any] | None:
    runs = system.get("runs", [])
    value = runs[run].get(workload) if run < len(runs) else None
    return value if value and value.get("ok") else None


def medians(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """column -> workload -> figure -> {"median", "runs"}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, system in results.items():
        out[name] = {}
        for workload in TIMED:
            figures: dict[str, Any] = {}
            for figure, (key, _, _) in FIGURES.items():
                found = [
                    float(v)
                    for run in range(len(system.get("runs", [])))
                    if isinstance(v := dig(ok_out(system, workload, run), (key,)), int | float)
                ]
                if found:
                    figures[figure] = {"median": statistics.median(found), "runs": found}
            if figures:
                out[name][workload] = figures
    return out


def judge(table: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each jobmaster-async column's jobs/s against the fastest other column's."""
    out = []
    for workload in TIMED:
        theirs = {
            name: w[workload]["jobs_per_s"]["median"]
            for name, w in table.items()
            if not is_async_jobmaster(name) and "jobs_per_s" in w.get(workload, {})
        }
        if not theirs:
            continue
        best = max(theirs, key=lambda n: theirs[n])
        for name, w in table.items():
            mine = w.get(workload, {}).get("jobs_per_s", {}).get("median")
            if not is_async_jobmaster(name) or mine is None:
                continue
            ratio = mine / theirs[best]
            out.append(
                {
                    "target": f"{workload}: jobs/s >= {TARGET:g}x the fastest other",
                    "jobmaster": name,
                    "value": mine,
                    "against": best,
                    "their_value": theirs[best],
                    "ratio": ratio,
                    "met": ratio >= TARGET,
                }
            )
    return out


def versions(results: dict[str, Any]) -> dict[str, Any]:
    """What ran in each column: its venv's versions, from its first good output."""
    out: dict[str, Any] = {}
    for name, system in results.items():
        good = (o for run in system.get("runs", []) for o in run.values() if o.get("ok"))
        first = next(good, None)
        out[name] = first["versions"] if first else system.get("install", {}).get("status")
    return out


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    table = medians(results)
    return {"versions": versions(results), "medians": table, "targets": judge(table)}


# -- the table --------------------------------------------------------------------
def cell(
    results: dict[str, Any], table: dict[str, Any], name: str, workload: str, figure: str
) -> str:
    found = table[name].get(workload, {}).get(figure)
    if found is not None:
        return FIGURES[figure][2].format(found["median"])
    if figure == "jobs_per_s":  # not drained: what it did by the deadline
        runs = results[name].get("runs", [])
        partial = [
            dig(ok_out(results[name], workload, r), ("partial_jobs_per_s",))
            for r in range(len(runs))
        ]
        if partial := [p for p in partial if p]:
            return f"~{statistics.median(partial):,.0f} partial"
        outs = [ok_out(results[name], workload, r) for r in range(len(runs))]
        if stuck := [o for o in outs if o and not o.get("drained")]:
            return f"{stuck[0].get('done', 0)}/{stuck[0].get('jobs')} done"
    return status_cell(results[name], workload)


def loads(results: dict[str, Any], memory: dict[str, Any]) -> list[float]:
    found = [
        float(out[key])
        for system in results.values()
        for run in system.get("runs", [])
        for out in run.values()
        for key in ("load_before", "load_after")
        if isinstance(out.get(key), int | float)
    ]
    found += [float(m[k]) for m in memory.values() for k in ("load_before", "load_after") if k in m]
    return found


def print_table(report: dict[str, Any]) -> None:
    out, results, table = sys.stderr, report["systems"], report["medians"]
    names = list(results)
    m, c = report["machine"], report["config"]
    seen = loads(results, report.get("memory", {}))
    load = f"{min(seen):.2f} to {max(seen):.2f}" if seen else "-"
    print(
        f"\npython {m['python']}  redis {m['redis']}  nproc {m['nproc']}  runs {c['runs']} "
        f"(medians)  jobs {c['jobs']:,}  2 worker processes each  "
        f"1-min load {m.get('load_at_start', 0):.2f} at start, {load} over the measures  "
        f"HTTP server on {report['http_server']['loop']}  "
        f"jobmaster {report.get('jobmaster_commit')}",
        file=out,
    )
    width = max(12, *(len(n) + 2 for n in names))
    for workload in (w for w in TIMED if w in c["workloads"]):
        print(f"\n{workload:<33}" + "".join(f"{n:>{width}}" for n in names), file=out)
        for figure, (_, label, _) in FIGURES.items():
            if figure == "http_cpu_us" and workload != "http":
                continue
            cells = [cell(results, table, n, workload, figure) for n in names]
            print(f"{label:<33}" + "".join(f"{x:>{width}}" for x in cells), file=out)
    print_memory(report.get("memory", {}), out)
    if report["targets"]:
        print("\nIssue 26's target (medians; the machine may be shared):", file=out)
    for t in report["targets"]:
        verdict = "MET" if t["met"] else "missed"
        print(
            f"  {t['target']} ({t['jobmaster']}): {t['ratio']:.2f}x {t['against']} "
            f"({t['value']:,.0f} vs {t['their_value']:,.0f} jobs/s): {verdict}",
            file=out,
        )
    print_details(results, out)


def print_memory(memory: dict[str, Any], out: Any) -> None:
    if not memory:
        return
    print("\nmemory: one jobmaster child, idle vs N async jobs in flight", file=out)
    for loop, m in memory.items():
        if not m.get("ok"):
            print(f"  [{loop}] FAILED: {m.get('error')}", file=out)
            continue
        idle, busy = m["idle"], m["busy"]
        print(
            f"  [{loop}] {m['jobs']:,} jobs (all running after {m['all_running_after_s']:.2f} s): "
            f"USS {idle['uss_mib']:.1f} → {busy['uss_mib']:.1f} MiB "
            f"(+{m['uss_kib_per_job']:.1f} KiB a job), "
            f"RSS {idle['rss_mib']:.1f} → {busy['rss_mib']:.1f} MiB "
            f"(+{m['rss_kib_per_job']:.1f} KiB a job); jobmaster's busy count "
            f"{m.get('jobmaster_busy')}, failed {m.get('jobmaster_failed')}",
            file=out,
        )
