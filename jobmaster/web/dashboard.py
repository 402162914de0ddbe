"""What every view needs: the Redis client, the config's limits, the guard, templates.

One Dashboard per app, kept in ``app.state``. It hands out jobmaster.api
objects (cheap to make) on the config's Redis and namespace, so views
never spell out a key name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jinja2
from starlette.requests import Request
from starlette.templating import Jinja2Templates

from jobmaster.api import DeadSet, JobSet, ProcessSet, Queue, RetrySet, ScheduledSet
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.deadset import DeadSetLimits
from jobmaster.web.auth import Guard
from jobmaster.web.formatting import FILTERS

SETS: dict[str, type[JobSet]] = {"scheduled": ScheduledSet, "retries": RetrySet, "dead": DeadSet}


def templates() -> Jinja2Templates:
    # autoescape everywhere: job data (arguments, errors) is shown, never interpreted.
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jobmaster.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(FILTERS)
    return Jinja2Templates(env=env)


@dataclass
class Dashboard:
    client: Client
    config: Config
    guard: Guard
    templates: Jinja2Templates = field(default_factory=templates)

    @property
    def limits(self) -> DeadSetLimits:
        return DeadSetLimits(self.config.dead_max_jobs, self.config.dead_max_days)

    def job_set(self, kind: str) -> JobSet:
        return SETS[kind](self.client, limits=self.limits)

    def queue(self, name: str) -> Queue:
        return Queue(name, self.client)

    def processes(self) -> ProcessSet:
        return ProcessSet(self.client)


def dashboard(request: Request) -> Dashboard:
    found: Dashboard = request.app.state.dashboard
    return found
