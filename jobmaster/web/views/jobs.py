"""``/jobs/JID``: a job's status, its result once complete, where it is now (a set,
a queue, or running), its attempts; cancel it (from here or the Busy page).

``/jobs?jid=...`` is the search box's target: it redirects to the job's page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobmaster import results
from jobmaster.api import Canceller, JobRecord
from jobmaster.api.base import Backend
from jobmaster.api.cancels import CANCELLABLE, CONFIRM_WAIT, PLACES
from jobmaster.api.queues import find_queued
from jobmaster.api.records import PEEK_BYTES
from jobmaster.client import Client
from jobmaster.web.dashboard import SETS, dashboard
from jobmaster.web.formatting import record_arguments
from jobmaster.web.routing import action, page, render, to
from jobmaster.web.views.sets import TITLES


def lookup(request: Request) -> Response:
    jid = request.query_params.get("jid", "").strip()
    if not jid:
        return render(request, "job.html", jid="", status=None, attempts=[], places=[], facts={})
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
    if not places and status in QUEUED:
        places += queued(client, jid)
    attempts = client.attempts(jid)
    return render(
        request,
        "job.html",
        jid=jid,
        status=status,
        result=results.preview(client.redis, client.keys, jid) if status == "complete" else None,
        cancellable=status in CANCELLABLE,
        attempts=attempts,
        places=places,
        facts=facts(places[0][2] if places else None, attempts[-1] if attempts else {}),
    )


QUEUED = frozenset(place for place, where in PLACES.items() if "queue" in where)


def queued(client: Client, jid: str) -> list[tuple[str, str, JobRecord]]:
    """Where the job waits in a queue, as a place of the page: its entry read to
    ``PEEK_BYTES`` at most (FIND_QUEUED's cap), so that a forged 100 MB entry
    is never read whole to show a page; an entry read in part still names its
    job and queue (records.py)."""
    found = find_queued(Backend.resolve(client), jid, keep=PEEK_BYTES)
    if found is None:
        return []
    queue, head, length = found
    return [(f"queue {queue.name}", "/queues", JobRecord.parse(head, length))]


def facts(record: JobRecord | None, last: dict[str, Any]) -> dict[str, str | None]:
    """The job's name, queue and arguments: from its entry where it waits or runs
    (arguments of an encrypt=True job stay sealed), else from its newest attempt,
    which names the job and queue but keeps no arguments. Read tolerantly: a
    forged entry gives None, never an error."""
    if record is not None and (record.job or record.queue):
        return {"job": record.job, "queue": record.queue, "arguments": record_arguments(record)}
    return {"job": last.get("job"), "queue": last.get("queue"), "arguments": None}


def job_cancel(request: Request, form: FormData) -> tuple[str, str]:
    """The Cancel button of the job page and of the Busy page's running jobs;
    back to the page it was pressed on (only those two: no open redirect)."""
    jid = request.path_params["jid"]
    page_of_job = f"/jobs/{quote(jid, safe='')}"
    back = "/busy" if form.get("back") == "/busy" else page_of_job
    # Waits for a running job's end (in the threadpool), so the flash says
    # what happened, as `jobmaster cancel` does.
    result = Canceller(dashboard(request).client).cancel(jid, CONFIRM_WAIT)
    return result.describe(), back


ROUTES = [page("/jobs", lookup), page("/jobs/{jid}", job), action("/jobs/{jid}/cancel", job_cancel)]
