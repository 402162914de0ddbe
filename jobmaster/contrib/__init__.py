"""Integrations with other libraries, each an optional extra (SPEC §14).

- ``jobmaster.contrib.sentry`` (``jobmaster[sentry]``): failures reported to Sentry.
- ``jobmaster.contrib.otel`` (``jobmaster[otel]``): OpenTelemetry traces from
  enqueue to the job.
- ``jobmaster.contrib.django`` (``jobmaster[django]``): a backend for Django's
  Tasks framework, and the worker's app module for a Django project.

Nothing here is imported by jobmaster itself: each module needs its library,
and importing it without the library fails with the extra to install.
"""
