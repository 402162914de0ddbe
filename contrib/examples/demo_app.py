"""The demo's jobs: what an app module of yours looks like."""

from __future__ import annotations

import logging

import jobmaster

log = logging.getLogger("demo_app")


@jobmaster.job(queue="default", retry=3)
def greet(name: str) -> None:
    log.info("Hello, %s!", name)


@jobmaster.job(queue="default", retry=0)
def add(a: int, b: int) -> int:
    log.info("%d + %d = %d", a, b, a + b)
    return a + b
