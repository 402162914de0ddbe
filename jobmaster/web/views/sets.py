"""``/scheduled``, ``/retries``, ``/dead``: paged, searchable; retry or delete one,
the selected ones, or all (all that match the search, when there is one);
on the first two, kill them too (into the dead set).

One form per page: each row's buttons send ``one=OP:JID``, the buttons under
the list send ``op`` with the ticked ``jid`` boxes (or ``all``). No JavaScript
needed, and no nested forms.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jobmaster.api import JobSet, KillableSet, NotRunnable, SortedEntry
from jobmaster.web.dashboard import SETS, dashboard
from jobmaster.web.paging import pager
from jobmaster.web.routing import action, page, render

TITLES = {"scheduled": "Scheduled", "retries": "Retries", "dead": "Dead"}
NEWEST_FIRST = {"scheduled": False, "retries": False, "dead": True}  # as people read them


def _listing(request: Request, kind: str) -> Response:
    jobs = dashboard(request).job_set(kind)
    query = request.query_params.get("q", "").strip()
    newest = NEWEST_FIRST[kind]
    if query:
        matches = list(jobs.search(query, newest_first=newest))
        pages = pager(request, len(matches))
        entries = matches[pages.start : pages.start + pages.per_page]
    else:
        pages = pager(request, jobs.size())
        entries = jobs.page(pages.start, pages.per_page, newest_first=newest)
    return render(
        request,
        "set.html",
        kind=kind,
        title=TITLES[kind],
        entries=entries,
        pager=pages,
        query=query,
    )


def scheduled(request: Request) -> Response:
    return _listing(request, "scheduled")


def retries(request: Request) -> Response:
    return _listing(request, "retries")


def dead(request: Request) -> Response:
    return _listing(request, "dead")


VERBS = {"retry": "retried", "delete": "deleted", "kill": "killed"}


def _apply(jobs: JobSet, op: str, entry: SortedEntry | str) -> bool:
    if op == "kill" and isinstance(jobs, KillableSet):
        return jobs.kill(entry)
    return jobs.retry(entry) if op == "retry" else jobs.delete(entry)


def _targets(request: Request, jobs: JobSet, form: FormData) -> list[SortedEntry | str]:
    """The ticked jids, or with ``?all=1`` (the "all" buttons' formaction) every
    entry, or every entry matching the page's search."""
    if not request.query_params.get("all"):
        return [str(jid) for jid in form.getlist("jid") if jid]
    query = str(form.get("q", "")).strip()
    return list(jobs.search(query)) if query else list(jobs)


def set_action(request: Request, form: FormData) -> tuple[str, str]:
    kind = request.path_params["kind"]
    if kind not in SETS:
        return f"no such set {kind!r}", "/"
    back = f"/{kind}"
    jobs = dashboard(request).job_set(kind)
    one = str(form.get("one", ""))  # a row's own button: "retry:JID"
    op, _, jid = one.partition(":") if one else (str(form.get("op", "")), "", "")
    if op not in VERBS or (op == "kill" and not isinstance(jobs, KillableSet)):
        return f"unknown action {op!r}", back
    verb = VERBS[op]
    targets: list[SortedEntry | str] = [jid] if jid else _targets(request, jobs, form)
    if op == "retry":  # garbage cannot run: "retry all" leaves it for "delete"
        targets = [t for t in targets if isinstance(t, str) or t.runnable]
    try:
        count = sum(_apply(jobs, op, target) for target in targets)
    except NotRunnable as error:
        return str(error), back
    if jid:
        return (f"{verb} {jid}" if count else f"{jid} was no longer there"), back
    return (f"{verb} {count} job(s)" if targets else "nothing selected"), back


ROUTES = [
    page("/scheduled", scheduled),
    page("/retries", retries),
    page("/dead", dead),
    action("/sets/{kind}/action", set_action),
]
