"""``/batches``: each batch's progress and outcome; cancel one."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jobmaster.api import BatchSet
from jobmaster.web.dashboard import dashboard
from jobmaster.web.paging import pager
from jobmaster.web.routing import action, page, render


def batches(request: Request) -> Response:
    found = BatchSet(dashboard(request).client).list()
    pages = pager(request, len(found))
    shown = found[pages.start : pages.start + pages.per_page]
    return render(request, "batches.html", batches=shown, pager=pages)


def batch_cancel(request: Request, form: FormData) -> tuple[str, str]:
    bid = request.path_params["bid"]
    if BatchSet(dashboard(request).client).cancel(bid):
        return f"batch {bid} cancelled: its jobs that have not started will be skipped", "/batches"
    return f"batch {bid}: nothing to cancel (unknown, finished or cancelled already)", "/batches"


ROUTES = [page("/batches", batches), action("/batches/{bid}/cancel", batch_cancel)]
