"""The web dashboard: an ASGI app (Starlette + Jinja2) built on jobmaster.api only.

Served by ``jobmaster web -c FILE`` (uvicorn), or mounted under a prefix in
the user's own ASGI app::

    from starlette.routing import Mount
    from jobmaster.config import load_config
    from jobmaster.web import create_app

    routes = [Mount("/jobs", app=create_app(load_config("jobmaster.toml")))]

Needs the ``web`` extra: ``pip install 'jobmaster[web]'``.
"""

from __future__ import annotations

from jobmaster.web.app import create_app

__all__ = ["create_app"]
