"""The asyncio producer side: ``aenqueue``, ``aresult``, ``acancel`` and the
workflows' ``a*`` calls, on redis-py's asyncio client (SPEC §12).

Each mirrors its sync call and shares its logic: what is sent is built by
the same functions (push_plans.py, results.py, api/cancels.py,
workflows/), only the sending is awaited. Like the sync producer side, it
imports nothing from the worker or supervisor.
"""
