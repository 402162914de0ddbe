"""``/periodic``: each entry's schedule, last and next run; enable or disable it.

The entries are the ones the last started master registered in Redis (the
dashboard's own config may not list them); enable/disable act on every master.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jobmaster.periodic import UnknownPeriodicEntry, disable, enable, list_periodic
from jobmaster.web.dashboard import dashboard
from jobmaster.web.routing import action, page, render


def periodic(request: Request) -> Response:
    return render(request, "periodic.html", entries=list_periodic(dashboard(request).client))


def periodic_action(request: Request, form: FormData) -> tuple[str, str]:
    name = request.path_params["name"]
    op = str(form.get("op", ""))
    if op not in ("enable", "disable"):
        return f"unknown action {op!r}", "/periodic"
    try:
        (enable if op == "enable" else disable)(name, dashboard(request).client)
    except UnknownPeriodicEntry as error:
        return str(error), "/periodic"
    return f"periodic {name}: {op}d on every master", "/periodic"


ROUTES = [page("/periodic", periodic), action("/periodic/{name}/action", periodic_action)]
