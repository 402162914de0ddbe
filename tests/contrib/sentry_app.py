"""The app a worker imports in tests/contrib/test_sentry.py: Sentry set up as
a user would, in the app module (so in the master, with preload), its DSN
pointing at the test's own collector (``SENTRY_TEST_DSN``)."""

from __future__ import annotations

import os

import sentry_sdk

import jobmaster
import jobmaster.contrib.sentry

sentry_sdk.init(dsn=os.environ["SENTRY_TEST_DSN"], default_integrations=True)
jobmaster.contrib.sentry.setup(report=os.environ.get("SENTRY_TEST_REPORT", "deaths"))  # type: ignore[arg-type]


class PaymentDeclined(Exception):
    pass


@jobmaster.job(retry=0)
def charge(order: int) -> None:
    raise PaymentDeclined(f"card declined for order {order}")


@jobmaster.job(retry=1, backoff=0)
def flaky(order: int) -> None:
    raise PaymentDeclined(f"gateway timeout for order {order}")


@jobmaster.job
def fine(order: int) -> int:
    return order


@jobmaster.job(retry=0)
def pill(order: int) -> None:
    """Kills its worker process: buried by the master after max_crashes."""
    os._exit(13)
