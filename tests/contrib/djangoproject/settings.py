"""A Django project for tests/contrib/test_django.py, as a user would write one.

``DJANGO_TEST_DATABASE``: ``sqlite:<path>`` or ``postgres:<database name>``
(the machine's server on 127.0.0.1:5432); unset, no database (the test
process, which only enqueues and reads results). ``DJANGO_TEST_REDIS_URL``:
the test's private Redis.
"""

from __future__ import annotations

import importlib.util
import os

SECRET_KEY = "tests-only"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.contrib.djangoproject.urls"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "tests.contrib.djangoproject.shop",
    "jobmaster.contrib.django",  # the jobmaster management command
    # Django >= 6 has django.tasks; before it, the backport is an app
    *([] if importlib.util.find_spec("django.tasks") else ["django_tasks"]),
]
MIDDLEWARE: list[str] = []
# Django's logging setup would replace the handlers of the process that sets
# it up: pytest's own, in the test process. The worker's logging is jobmaster's.
LOGGING_CONFIG = None

_database = os.environ.get("DJANGO_TEST_DATABASE", "")
_engine, _, _name = _database.partition(":")
if _engine == "sqlite":
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _name}}
elif _engine == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _name,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "CONN_MAX_AGE": 60,  # kept across jobs: close_old_connections decides
        }
    }
else:
    DATABASES = {}

TASKS = {
    "default": {
        "BACKEND": "jobmaster.contrib.django.JobmasterBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"REDIS_URL": os.environ.get("DJANGO_TEST_REDIS_URL", "redis://127.0.0.1:1/0")},
    }
}
