"""``jobmaster web``: serve the dashboard (jobmaster.web) with uvicorn.

It listens on 127.0.0.1 unless told otherwise, and refuses (exit 2, before
binding anything) to listen on any other address without ``web_password``
or ``web_token``: an open dashboard can delete every job and stop every
worker, so it must not be reachable from the network without a password.
"""

from __future__ import annotations

import ipaddress

import click

from jobmaster.commands.common import command_options
from jobmaster.commands.options import load
from jobmaster.commands.output import echo
from jobmaster.config import Config
from jobmaster.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321


def is_loopback(host: str) -> bool:
    """Only this machine can reach it: 127.0.0.0/8, ::1 or "localhost"."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_exposure(host: str, config: Config) -> None:
    if not is_loopback(host) and not (config.web_password or config.web_token):
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without a password: set web_password "
            "(or web_token) in the config or JOBMASTER_WEB_PASSWORD in the environment, "
            f"or listen on {DEFAULT_HOST}"
        )


@click.command(name="web")
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to listen on; anything but loopback needs web_password or web_token.",
)
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    help="A reverse proxy (address or network) whose X-Forwarded-For/-Proto is believed "
    "(repeat for several; the web_trusted_proxies setting). None by default.",
)
@command_options
def web_command(
    host: str,
    port: int,
    trusted_proxies: tuple[str, ...],
    config_file: str | None,
    redis_url: str | None,
    debug: bool,
) -> None:
    """Serve the web dashboard: queues, processes, retries, dead jobs, and actions on them.

    Needs the `web` extra (pip install 'jobmaster[web]'). To mount it inside
    your own ASGI app instead, see jobmaster.web.create_app.
    """
    overrides: dict[str, object] = {"redis_url": redis_url}
    if trusted_proxies:
        overrides["web_trusted_proxies"] = list(trusted_proxies)
    config = load(config_file, overrides)
    check_exposure(host, config)
    try:
        import uvicorn

        from jobmaster.web import create_app
        from jobmaster.web.auth import AUTO
        from jobmaster.web.door import host_name
    except ImportError as error:
        raise ConfigError(
            f"the dashboard needs the web extra: pip install 'jobmaster[web]' ({error})"
        ) from None
    app = create_app(config, listen=host)
    where = f"http://{host_name(host)}:{port}/"
    echo(f"jobmaster web: {where} on Redis {config.redis_url_masked}")
    if config.web_token.strip().lower() == AUTO:
        # As Jupyter does: the one way in, shown only to whoever started it.
        echo(f"jobmaster web: log in with {where}?token={app.state.dashboard.guard.token}")
    elif not (config.web_password or config.web_token):
        echo(
            "jobmaster web: no web_password or web_token: every local user of this "
            'machine can use the dashboard (web_token = "auto" keeps them out)'
        )
    # uvicorn's own proxy_headers would trust X-Forwarded-For from 127.0.0.1,
    # so any local user could claim any address and reset the login throttle:
    # off, and the app believes only web_trusted_proxies (web/app.py).
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
