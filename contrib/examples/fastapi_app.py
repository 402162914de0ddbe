"""FastAPI and jobmaster: enqueue from an endpoint, a result endpoint, the dashboard mounted.

Run it (from this folder; jobmaster.toml names the Redis both sides use)::

    export JOBMASTER_CONFIG=jobmaster.toml
    uvicorn --factory fastapi_app:create_app           # the web app
    jobmaster -c jobmaster.toml -a fastapi_app          # the worker

    curl -X POST localhost:8000/thumbnails/42?size=64  # {"jid": "..."}
    curl localhost:8000/jobs/<jid>?wait=5              # {"status": "complete", "result": {...}}
    open http://localhost:8000/admin/jobs/             # the dashboard

The endpoints are ``async``: enqueueing and waiting for a result must not
hold up the event loop. ``make_thumbnail.aenqueue`` and ``jobmaster.aresult``
do that with redis-py's asyncio client (SPEC §12); on a jobmaster without
them, the same calls run in Starlette's thread pool.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, HTTPException, Response
from starlette.concurrency import run_in_threadpool

import jobmaster
from jobmaster.config import load_config
from jobmaster.web import create_app as create_dashboard

MAX_WAIT = 30.0  # seconds a request may wait for a job's end


@jobmaster.job(retry=3)
def make_thumbnail(image_id: int, size: int = 128) -> dict[str, Any]:
    """A job: what the worker runs (here, a stand-in for real image work)."""
    if size <= 0:
        raise jobmaster.Permanent(f"size must be positive, got {size}")  # not retried
    return {"image": image_id, "size": size, "path": f"/thumbs/{image_id}-{size}.png"}


async def _enqueue(job: Any, *args: Any, **kwargs: Any) -> str | None:
    if hasattr(job, "aenqueue"):
        jid: str | None = await job.aenqueue(*args, **kwargs)
        return jid
    return await run_in_threadpool(job.enqueue, *args, **kwargs)


async def _result(jid: str, wait: float) -> Any:
    if hasattr(jobmaster, "aresult"):
        return await jobmaster.aresult(jid, wait=wait)
    return await run_in_threadpool(jobmaster.result, jid, wait)


def create_app(config_path: str | None = None) -> FastAPI:
    """The web app, on the Redis of ``config_path`` (else ``$JOBMASTER_CONFIG``,
    else jobmaster's environment defaults)."""
    path = config_path or os.environ.get("JOBMASTER_CONFIG") or None
    if path is not None:
        jobmaster.configure(config=path)  # where enqueue pushes: the workers' Redis
    app = FastAPI(title="thumbnails")

    @app.post("/thumbnails/{image_id}", status_code=202)
    async def request_thumbnail(image_id: int, size: int = 128) -> dict[str, Any]:
        return {"jid": await _enqueue(make_thumbnail, image_id, size=size)}

    @app.get("/jobs/{jid}")
    async def job_result(jid: str, response: Response, wait: float = 0) -> dict[str, Any]:
        """200 with the result once complete (or the failure); 202 while it waits or
        runs; 404 for a jid jobmaster knows nothing of."""
        try:
            value = await _result(jid, min(max(wait, 0.0), MAX_WAIT))
        except jobmaster.UnknownJob:
            raise HTTPException(status_code=404, detail=f"no job {jid}") from None
        except jobmaster.ResultPending:
            response.status_code = 202
            return {"jid": jid, "status": jobmaster.status(jid)}
        except jobmaster.JobFailed as failed:
            return {
                "jid": jid,
                "status": failed.status,
                "error": {"class": failed.error_class, "message": failed.error_message},
            }
        return {"jid": jid, "status": "complete", "result": value}

    # The dashboard, under your own authentication or its web_password/web_token
    # (docs/operations.md); its links, forms and cookie follow the prefix.
    app.mount("/admin/jobs", create_dashboard(load_config(path)))
    return app
