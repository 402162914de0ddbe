"""The jobs of the example app: the README's ``send_email`` and the nightly
report that the example's ``[periodic.nightly_report]`` entry enqueues.
Replace them with your own (and ``app`` in the config with your modules)."""

from __future__ import annotations

import logging

import jobmaster

log = logging.getLogger("myapp.jobs")


@jobmaster.job(queue="default", retry=25)
def send_email(user_id: int, template: str) -> None:
    log.info("would send %r to user %d", template, user_id)


@jobmaster.job(queue="low", retry=3)
def nightly_report() -> None:
    log.info("would build the nightly report")
