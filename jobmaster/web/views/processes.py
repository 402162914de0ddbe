"""``/busy``: masters and their children, the jobs running now; quiet, resume, stop.

Commands go through Redis (ProcessSet.send): a master on another host acts
on them at its next look at its control list (a fraction of a second).
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jobmaster.api import Process
from jobmaster.web.charts import MemoryBar, memory_bar
from jobmaster.web.dashboard import dashboard
from jobmaster.web.routing import action, page, render

COMMANDS = ("quiet", "resume", "stop")


def _bars(processes: list[Process]) -> dict[str, MemoryBar]:
    """A memory bar per worker process, against its master's limit; and one per
    master with a container limit: its cgroup's usage against that limit."""
    limits = {p.identity: p.max_child_mb for p in processes if p.role == "master"}
    workers = [p for p in processes if p.role != "master"]
    largest = max((p.memory_mb or 0.0 for p in workers), default=0.0)
    bars = {
        p.identity: memory_bar(p.memory_mb, limits.get(p.master or "", 0.0), largest)
        for p in workers
    }
    for p in processes:
        if p.role == "master" and p.memory_limit_mb:
            bars[p.identity] = memory_bar(p.memory_used_mb, p.memory_limit_mb, 0.0)
    return bars


def busy(request: Request) -> Response:
    processes_api = dashboard(request).processes()
    listing = processes_api.listing()
    processes = listing.processes
    return render(
        request,
        "busy.html",
        processes=processes,
        notes=listing.notes(),
        bars=_bars(processes),
        running=processes_api.running(processes),
    )


def control(request: Request, form: FormData) -> tuple[str, str]:
    command = str(form.get("command", ""))
    if command not in COMMANDS:
        return f"unknown command {command!r}", "/busy"
    processes = dashboard(request).processes()
    identity = str(form.get("identity", ""))
    if not identity:
        told = processes.send_all(command)
        return f"{command}: told {told} master(s) and lone worker(s)", "/busy"
    if processes.send(identity, command):
        return f"{command}: sent to {identity}", "/busy"
    return f"{identity} is gone (no heartbeat): nothing sent", "/busy"


ROUTES = [page("/busy", busy), action("/busy/control", control)]
