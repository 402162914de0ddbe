"""Workflows: chains (one job after another) and batches (many jobs, callbacks
when they are done), with the reliability contract of single jobs.

``signature.py`` is a job call as data; ``chain.py`` and ``batch.py`` are the
producer side; ``steps.py`` is what a worker does when a step ends (the
FINISH_STEP script moves the workflow in the same atomic step as the job's
outcome).
"""
