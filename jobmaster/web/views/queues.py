"""``/queues`` and ``/queues/NAME``: sizes and latency; pause, resume, clear; a
queue's jobs page by page, each deletable."""

from __future__ import annotations

from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jobmaster.api import Stats
from jobmaster.web.dashboard import dashboard
from jobmaster.web.paging import pager
from jobmaster.web.routing import action, page, render


def queues(request: Request) -> Response:
    return render(request, "queues.html", queues=Stats(dashboard(request).client).queues)


def queue(request: Request) -> Response:
    found = dashboard(request).queue(request.path_params["name"])
    size = found.size()
    pages = pager(request, size)
    return render(
        request,
        "queue.html",
        queue=found,
        size=size,
        paused=found.is_paused(),
        latency=found.latency(),
        records=found.page(pages.start, pages.per_page),
        pager=pages,
    )


def queue_action(request: Request, form: FormData) -> tuple[str, str]:
    name = request.path_params["name"]
    found = dashboard(request).queue(name)
    what = str(form.get("op", ""))
    if what == "pause":
        found.pause()
        return f"queue {name} paused: workers leave its jobs where they are", "/queues"
    if what == "resume":
        found.resume()
        return f"queue {name} resumed", "/queues"
    if what == "clear":
        return f"queue {name}: {found.clear()} job(s) deleted", "/queues"
    if what == "delete":
        jid = str(form.get("jid", ""))
        deleted = found.delete(jid)
        back = f"/queues/{quote(name, safe='')}"
        return (f"deleted {jid}" if deleted else f"{jid} was no longer queued"), back
    return f"unknown action {what!r}", "/queues"


ROUTES = [
    page("/queues", queues),
    page("/queues/{name}", queue),
    action("/queues/{name}/action", queue_action),
]
