"""Helpers shared by the API tests."""
from __future__ import annotations


def job_body(name="job", queue="alpha", tasks=1, gpus=1, **extra) -> dict:
    return {"name": name, "queue": queue, "command": "sleep 3600", "roles": [{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}], **extra}


def table_counts() -> dict[str, int]:
    """Row counts of every platform table (the 'nothing is stored' check)."""
    from django.apps import apps

    return {m.__name__: m.objects.count() for m in apps.get_app_config("gpuplatform").get_models()}


def at_once(calls) -> list:
    """Run the callables in threads released together (a barrier), each closing its database connections after;
    returns their results in order (None where one raised or did not end in 60 s)."""
    import threading

    from django.db import connections

    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i):
        try:
            barrier.wait(timeout=10)
            out[i] = calls[i]()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out

