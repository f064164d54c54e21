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


def waiting_on_lock() -> bool:
    """Whether some PostgreSQL backend waits for a lock (pg_locks)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cur.fetchone()[0] > 0


def ordered(first, second):
    """Run first() in a transaction held open until second() (in its own thread and transaction) waits for a
    lock or has ended; then commit first. Returns {"result": second's result, or "error": what it raised,
    "waited": whether it was still running when first was let commit, and "first_error" when first raised}."""
    import threading
    import time

    from django.db import connections, transaction

    wrote, go, out = threading.Event(), threading.Event(), {}

    def run_first():
        try:
            with transaction.atomic():
                first()
                wrote.set()
                assert go.wait(30), "the test never let the first change commit"
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["first_error"] = exc
        finally:
            wrote.set()
            connections.close_all()

    def run_second():
        try:
            with transaction.atomic():
                out["result"] = second()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc
        finally:
            connections.close_all()

    a = threading.Thread(target=run_first)
    a.start()
    assert wrote.wait(30)
    b = threading.Thread(target=run_second)
    b.start()
    deadline = time.monotonic() + 30
    while b.is_alive() and not waiting_on_lock() and time.monotonic() < deadline:
        time.sleep(0.02)
    out["waited"] = b.is_alive()
    go.set()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive()
    return out
