"""New-user trial 17b, F11: a queue move (the queue tree's lock exclusive, the moved queue's row, and at commit
the deferred foreign key check on its new parent's row) and the scheduling cycle's usage_decay.record (every
queue's row, in name order) deadlocked: "scheduling cycle N failed ... deadlock detected". The record now takes
the tree's lock shared before any queue row, so the two run one after the other.

Ordered, not raced (as tests/api/test_queue_tree_lock.py): the move runs in a thread and stops before its commit;
the record starts on its own connection, and the move commits only once the record waits on a lock."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services,
              pytest.mark.postgresql("row and advisory locks: PostgreSQL")]


def _waiting_on_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cur.fetchone()[0] > 0


def test_a_queue_move_and_the_cycles_usage_record_at_once_both_commit(alpha):
    from gpuplatform import services
    from gpuplatform.models import Queue
    from gpuplatform.scheduling import usage_decay

    team, _ = alpha
    services.create_queue("aa-parent", team=team)  # sorts before the moved queue: the record locks it first
    moved = services.create_queue("zz-moved", team=team)
    clock = timezone.now()
    config = dataclasses.replace(usage_decay.default_config(), usage_half_life=3600)
    wrote, go, out = threading.Event(), threading.Event(), {}

    def move():  # as the API's PATCH /queues/<name>/ {"parent": ...} (api/views/queues.py _update)
        try:
            with transaction.atomic():
                services.lock_queue_tree()
                queue = Queue.objects.select_for_update(no_key=True).get(pk=moved.pk)
                services.update_queue(queue, parent="aa-parent")
                wrote.set()
                assert go.wait(30), "the test never let the move commit"
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["move_error"] = exc
        finally:
            wrote.set()
            connections.close_all()

    def record():
        try:
            out["recorded"] = usage_decay.record({"zz-moved": {"H100": 1.0}}, clock, config)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["record_error"] = exc
        finally:
            connections.close_all()

    a = threading.Thread(target=move)
    a.start()
    assert wrote.wait(30)
    b = threading.Thread(target=record)
    b.start()
    deadline = time.monotonic() + 30
    while b.is_alive() and not _waiting_on_lock() and time.monotonic() < deadline:
        time.sleep(0.02)
    go.set()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive()
    assert "move_error" not in out and "record_error" not in out, out
    assert out["recorded"] == Queue.objects.count()
    row = Queue.objects.get(pk=moved.pk)
    assert row.parent.name == "aa-parent" and row.recent_usage_at == clock and row.recent_usage
