"""``/jobs/JID``: a job's status, its result once complete, where it is now (a set,
or running), its attempts.

``/jobs?jid=...`` is the search box's target: it redirects to the job's page.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobmaster import results
from jobmaster.api import JobRecord
from jobmaster.web.dashboard import SETS, dashboard
from jobmaster.web.routing import page, render, to
from jobmaster.web.views.sets import TITLES


def lookup(request: Request) -> Response:
    jid = request.query_params.get("jid", "").strip()
    if not jid:
        return render(request, "job.html", jid="", status=None, attempts=[], places=[])
    return RedirectResponse(to(request, f"/jobs/{quote(jid, safe='')}"), status_code=303)


def job(request: Request) -> Response:
    board = dashboard(request)
    jid = request.path_params["jid"]
    places: list[tuple[str, str, JobRecord]] = []  # (title, link, record)
    for kind in SETS:
        entry = board.job_set(kind).find(jid)
        if entry is not None:
            places.append((TITLES[kind], f"/{kind}", entry))
    for running in board.processes().running():
        if running.record.jid == jid:
            places.append((f"running in {running.identity}", "/busy", running.record))
    client = board.client
    status = client.status(jid)
    return render(
        request,
        "job.html",
        jid=jid,
        status=status,
        result=results.preview(client.redis, client.keys, jid) if status == "complete" else None,
        attempts=client.attempts(jid),
        places=places,
    )


ROUTES = [page("/jobs", lookup), page("/jobs/{jid}", job)]
