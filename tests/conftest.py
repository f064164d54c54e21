"""Session-wide test hygiene: the run leaves no keys in Redis.

Submissions in tests ask for a scheduling cycle after commit; with REDIS_URL set that enqueues a Celery
message, and the integration tests' worker adds its queue, bindings and results. The keys each Redis
database used by this run (REDIS_URL, INTEGRATION_REDIS_URL) did not hold when the session started are
deleted when it ends. Keys that were there before the run are left alone.

Hypothesis: under CI (the CI variable set, as .ci/run does) the property tests run derandomized (the same
examples on every run, no example database), so a CI verdict depends on the commit, not on the draw; a failure
prints its reproduction blob. Outside CI they draw fresh examples on every run, which is where new
counter-examples are found (each found one becomes a fixed-world test, as tests/core/test_reclaim_known_gaps.py).
A test's own @settings override only the keys it names.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import settings as hypothesis_settings

hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


def _clients():
    urls = {u for u in (os.environ.get("REDIS_URL"), os.environ.get("INTEGRATION_REDIS_URL")) if u}
    if not urls:
        return []
    try:
        import redis
    except ImportError:
        return []
    clients = []
    for url in sorted(urls):
        try:
            client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            clients.append((client, set(client.scan_iter(count=1000))))
        except Exception:  # noqa: BLE001 - no Redis, nothing to clean
            continue
    return clients


@pytest.fixture(scope="session", autouse=True)
def _redis_keys_cleaned_up():
    clients = _clients()
    yield
    for client, before in clients:
        try:
            created = [k for k in client.scan_iter(count=1000) if k not in before]
            for i in range(0, len(created), 500):
                client.delete(*created[i:i + 500])
        except Exception:  # noqa: BLE001
            continue


@pytest.fixture(autouse=True)
def _require_postgresql(request):
    """`@pytest.mark.postgresql`: the test checks a guarantee only PostgreSQL gives (row locks under concurrent
    writers; the test runner's SQLite is an in-memory shared-cache database whose table locks answer a concurrent
    reader at once, so threads against it fail with 503s that say nothing of the product). Mark it `services`
    too, so `make test-fast` leaves it out. On another database it fails when CI is set (CI runs PostgreSQL:
    never a silent skip there) and skips otherwise (new-user trial 11, F8)."""
    marker = request.node.get_closest_marker("postgresql")
    if marker is None:
        return
    from django.db import connection

    if connection.vendor == "postgresql":
        return
    why = marker.args[0] if marker.args else "needs PostgreSQL"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and the database is {connection.vendor}, not PostgreSQL: {why}")
    pytest.skip(f"needs PostgreSQL: {why} (this run's database is {connection.vendor})")


@pytest.fixture(autouse=True)
def _fresh_rule_tables():
    """The parsed diagnosis / health rule tables are cached per process (diagnosis/tables.py) and a test's
    rolled-back rule rows send no signal: every test starts from the database's rows."""
    import sys

    def clear():
        tables = sys.modules.get("gpuplatform.diagnosis.tables")  # imported only by tests of the platform
        if tables is not None:
            tables._memo.clear()
    clear()
    yield
    clear()


@pytest.fixture
def held_world(db, django_user_model):
    """One 8-GPU node: a running 6-GPU job, then a pending 8-GPU job the cycle holds the 2 free GPUs for
    (free 0, held 2). Returns a staff user. Used by the held-GPU tests of the API and of the topology map."""
    from datetime import datetime, timedelta, timezone as tz

    from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec
    from gpuplatform import services
    from gpuplatform.models import Queue
    from gpuplatform.scheduling import store

    clock = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
    services.load_cluster_spec(ClusterSpec(name="one", nodes=(NodeSpec("n1", "H100", 8),),
                                           queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 8, 8)}),)))
    queue = Queue.objects.get(name="q")
    services.submit_job(team=queue.team, queue=queue, name="r6", roles=[{"tasks": 1, "gpus_per_task": 6}],
                        command=["sleep", "3600"], time_limit_seconds=600, submitted_at=clock)
    store.run_cycle_once(clock=clock)
    services.submit_job(team=queue.team, queue=queue, name="big", roles=[{"tasks": 1, "gpus_per_task": 8}],
                        command=["sleep", "3600"], submitted_at=clock)
    store.run_cycle_once(clock=clock + timedelta(seconds=10))
    return django_user_model.objects.create_user("ops", password="pw", is_staff=True)
