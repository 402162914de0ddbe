"""The app config, for ``INSTALLED_APPS = [..., "jobmaster.contrib.django"]``: only
needed for the ``jobmaster`` management command (the backend works without it)."""

from __future__ import annotations

from django.apps import AppConfig


class JobmasterConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "jobmaster.contrib.django"
    label = "jobmaster"  # "django", the package's last name, would read as Django's own
    verbose_name = "jobmaster"
