"""``/``: totals, today, the last hour's throughput, queues, the Redis server.

``/stats.json`` feeds the live refresh of every page's counters and
``/chart.svg`` the chart's (static/app.js).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from jobmaster.api import Stats, redis_info, throughput
from jobmaster.web.charts import throughput_chart
from jobmaster.web.dashboard import dashboard
from jobmaster.web.routing import json_page, page, render


def overview(request: Request) -> Response:
    client = dashboard(request).client
    return render(
        request,
        "overview.html",
        stats=Stats(client),
        info=redis_info(client),
        chart=throughput_chart(throughput(client)),
    )


def chart_svg(request: Request) -> Response:
    chart = throughput_chart(throughput(dashboard(request).client))
    response = render(request, "chart.svg", chart=chart)
    response.headers["content-type"] = "image/svg+xml"
    response.headers["cache-control"] = "no-store"
    return response


def stats_json(request: Request) -> dict[str, Any]:
    """The counters every page shows, and the overview's numbers."""
    client = dashboard(request).client
    stats = Stats(client)
    info = redis_info(client)
    return {
        **stats.as_dict(),
        "redis_version": info["version"],
        "redis_uptime_seconds": info["uptime_seconds"],
        "redis_connected_clients": info["connected_clients"],
        "redis_used_memory_human": info["used_memory_human"],
    }


ROUTES = [
    page("/", overview),
    page("/chart.svg", chart_svg),
    json_page("/stats.json", stats_json),
]
