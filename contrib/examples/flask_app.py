"""Flask and jobmaster: jobs that need the Flask app context.

A job often needs what a request has: ``current_app.config``, an extension
bound to the app (Flask-SQLAlchemy's ``db``, Flask-Mail), ``url_for`` for
links in an email. A worker has no request, so it gets no app context by
itself: ``FlaskAppContext`` gives every job one, pushed in the job's own
thread around its run, as Flask does for a request.

Run it (from this folder; jobmaster.toml names the Redis both sides use)::

    export JOBMASTER_CONFIG=jobmaster.toml
    flask --app flask_app run                  # the web app
    jobmaster -c jobmaster.toml -a flask_app   # the worker: imports this module,
                                               # so it builds the app once, in the master

    curl -X POST localhost:5000/users/7/welcome   # {"jid": "..."}
    curl localhost:5000/jobs/<jid>                # {"status": "complete", "result": {...}}
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, current_app, url_for

import jobmaster
from jobmaster import middleware
from jobmaster.middleware import JobContext, Middleware


class FlaskAppContext(Middleware):
    """Every job runs inside ``app.app_context()`` (one per job, in its thread)."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self._pushed: dict[str, Any] = {}  # jid -> its context, between the two hooks

    def before_process(self, job: JobContext) -> None:
        context = self.app.app_context()
        context.push()
        self._pushed[job.jid] = context

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        context = self._pushed.pop(job.jid, None)
        if context is not None:
            context.pop(error)  # runs the app's teardown_appcontext functions


@jobmaster.job(retry=5)
def send_welcome(user_id: int) -> dict[str, str]:
    """Needs the app: its configuration and ``url_for`` (an absolute link)."""
    link = url_for("profile", user_id=user_id, _external=True)
    sender = current_app.config["MAIL_SENDER"]
    # A real app would send the mail here (Flask-Mail needs the app context too).
    return {"from": sender, "to": f"user-{user_id}@example.com", "link": link}


def create_app(config_path: str | None = None) -> Flask:
    """The app, on the Redis of ``config_path`` (else ``$JOBMASTER_CONFIG``)."""
    app = Flask(__name__)
    app.config.update(
        MAIL_SENDER=os.environ.get("MAIL_SENDER", "welcome@example.com"),
        # url_for(..., _external=True) outside a request (in a job) needs these.
        SERVER_NAME=os.environ.get("SERVER_NAME", "localhost:5000"),
        PREFERRED_URL_SCHEME=os.environ.get("PREFERRED_URL_SCHEME", "http"),
    )
    path = config_path or os.environ.get("JOBMASTER_CONFIG") or None
    if path is not None:
        jobmaster.configure(config=path)

    @app.get("/users/<int:user_id>")
    def profile(user_id: int) -> dict[str, int]:
        return {"user": user_id}

    @app.post("/users/<int:user_id>/welcome")
    def welcome(user_id: int) -> tuple[dict[str, Any], int]:
        return {"jid": send_welcome.enqueue(user_id)}, 202

    @app.get("/jobs/<jid>")
    def job_result(jid: str) -> tuple[dict[str, Any], int]:
        try:
            return {"status": "complete", "result": jobmaster.result(jid)}, 200
        except jobmaster.UnknownJob:
            return {"error": f"no job {jid}"}, 404
        except jobmaster.ResultPending:
            return {"status": jobmaster.status(jid)}, 202
        except jobmaster.JobFailed as failed:
            return {"status": failed.status, "error": failed.error_class}, 200

    return app


def worker_app() -> Flask:
    """In the worker (this module imported by it): the app every job runs in."""
    app = create_app()
    middleware.add(FlaskAppContext(app))
    return app


@jobmaster.on_master_start
def _in_the_worker() -> None:
    # Runs only in a worker's master, after the import and before the forks:
    # the web process that imports this module never builds a second app.
    worker_app()
