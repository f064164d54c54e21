"""A throw-away PostgreSQL database for the end-to-end benchmarks, and bulk loading of a world into it.

    with bench_database("bench_cycle") as ok:     # creates, migrates, yields; drops on exit
        if ok: load_world(snapshot)

The server is taken from BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres); the
benchmark database is named per script and process (`database_name`: two runs at once never share or drop each
other's) and dropped before and after use. Django is pointed at it
(use_database: set up with it, or switched to it when another benchmark set Django up earlier in the same
process) and pointed back at what it used before when the block ends.
"""
from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone as dt_tz
from urllib.parse import urlparse

import _common  # noqa: F401  (import path)

SERVER_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
EPOCH = datetime(2026, 1, 1, tzinfo=dt_tz.utc)


def postgres_available() -> str | None:
    """None when the server answers, else why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    u = urlparse(SERVER_URL)
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or 5432), timeout=1):
            pass
    except OSError as exc:
        return f"PostgreSQL unreachable at {u.hostname}:{u.port}: {exc}"
    return None


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(SERVER_URL, autocommit=True) as conn:
        conn.execute(sql)


def database_name(name: str) -> str:
    """The database a benchmark creates and drops: BENCH_DB when set (the caller's own), else `name` and this
    process's id ("bench_cycle_scale_4242"), so two benchmark runs at once on one server (two `make bench`, two
    users) never drop each other's database (new-user trial 10, F14)."""
    return os.environ.get("BENCH_DB") or f"{name}_{os.getpid()}"


@contextmanager
def bench_database(name: str):
    """Create database `database_name(name)` on the server, point Django at it, migrate, yield; drop it afterwards.
    A run killed before its drop leaves its database behind (named with its process id; drop it by hand): whether
    another run's process is gone cannot be told from here when the server is shared (review 11, S4)."""
    problem = postgres_available()
    if problem:
        raise RuntimeError(problem)
    name = database_name(name)
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}"')
    u = urlparse(SERVER_URL)
    before = {k: os.environ.get(k) for k in ("DATABASE_URL", "REDIS_URL")}
    os.environ["REDIS_URL"] = ""  # no broker: submissions must not enqueue cycles
    previous = use_database(f"{u.scheme}://{u.netloc}/{name}")
    from django.core.management import call_command

    try:
        call_command("migrate", verbosity=0)
        yield True
    finally:
        from django.conf import settings
        from django.db import connections

        connections.close_all()
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        # the process as it was: a later benchmark in the same process (benchmarks/run.py) must not be left
        # pointing at the database just dropped (new-user report 8 F18: topology_payload failed so in `make bench`)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if previous is not None:
            settings.DATABASES["default"] = previous
            _forget_connections()


def backend_cpu() -> float:
    """CPU seconds (user + system) of the default connection's server process so far, read from /proc (the
    server runs on this machine); NaN when it cannot be read (no connection yet, another machine)."""
    from django.db import connection

    pid = connection.connection.info.backend_pid if connection.connection is not None else 0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def ab_world(which: str):
    """The A/B scripts' worlds: "bind" = bind_throughput.py's (280 racks, 20,000 one-GPU jobs), else the headline
    world of cycle_scale.py (20,160 GPUs, 10,000 pending, 5,000 running)."""
    if which == "bind":
        import bind_throughput

        return bind_throughput.world(280, 20_000, 1)
    return _common.scale_world(racks=280, pending=10_000, running=5_000)


def store_variants() -> dict:
    """{"this": this tree's gpuplatform.scheduling.store}, and "base": another tree's store.py (the file BASE names,
    loaded as gpuplatform.scheduling.store_base) when BASE is set: the A/B scripts' two applies in one process."""
    import importlib.util
    import sys

    from gpuplatform.scheduling import store

    if not os.environ.get("BASE"):
        return {"this": store}
    spec = importlib.util.spec_from_file_location("gpuplatform.scheduling.store_base", os.environ["BASE"])
    base = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    return {"base": base, "this": store}


def one_engine_result():
    """(clock, CycleResult) of one engine run on the loaded world's snapshot, as the cycle makes them (store's
    snapshot read and engine cache, the default config), after VACUUM ANALYZE: what the apply A/B scripts apply."""
    from django.db import connection
    from django.utils import timezone

    from gpuplatform.scheduling import store, usage_decay
    from scheduler.core import run_cycle

    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    clock = timezone.now()
    snapshot, _ = store.build_snapshot(clock.timestamp(), cycle=1, memo=store.SnapshotMemo())
    result = run_cycle(snapshot, usage_decay.default_config(), cache=store.ENGINE_CACHE)
    print(f"engine: {len(result.bindings)} bindings", flush=True)
    return clock, result


@contextmanager
def timed_commits(state: dict):
    """Within the block, each commit of Django's default connection adds its wall seconds to state["commit"] (the
    apply benchmarks' split of a cycle's apply into statements and the commit, where deferred checks run)."""
    import time

    from django.db import connection

    commit = connection._commit

    def timed_commit():
        t = time.perf_counter()
        try:
            return commit()
        finally:
            state["commit"] += time.perf_counter() - t

    connection._commit = timed_commit
    try:
        yield
    finally:
        connection._commit = commit


def use_database(url: str) -> dict | None:
    """Point this process's Django at database `url` (DATABASE_URL): set up Django with it, or, when settings
    were read already (another benchmark ran first in this process), replace the default database's settings
    (gpuplatform.settings.database_config) and drop the open connection. Returns the settings it replaced,
    None when Django was set up here."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    import django
    from django.apps import apps
    from django.conf import settings

    if not apps.ready:
        django.setup()
        return None
    from gpuplatform.settings import database_config

    previous = settings.DATABASES["default"]
    settings.DATABASES["default"] = database_config(url)
    _forget_connections()
    return previous


def _forget_connections() -> None:
    """Close the default connection and make Django read its settings again on the next use."""
    from django.db import connections

    connections.close_all()
    connections.__dict__.pop("settings", None)  # a cached_property of the settings it was built from
    try:
        del connections["default"]
    except AttributeError:  # no connection object in this thread
        pass


def load_world(snapshot) -> dict:
    """Load a core Snapshot into the database: the cluster through services.load_cluster_spec, then
    jobs, roles, tasks and (for running jobs) GPU allocations with bulk inserts. Returns
    {"pending_ids": [...], "seconds": {...}}."""
    import time

    from gpuplatform import services
    from gpuplatform.models import Allocation, Gpu, Job, JobRole, Node, Queue, Task
    from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec

    t0 = time.perf_counter()
    spec = ClusterSpec(
        name="bench",
        nodes=tuple(NodeSpec(n.name, n.flavor, n.gpus, n.domain, gpu_numa=tuple(n.gpu_numa)) for n in snapshot.nodes),
        domains=tuple(DomainSpec(d.name, d.tier, d.parent) for d in snapshot.domains),
        queues=tuple(QueueSpec(q.name, q.parent, q.name, q.weight,
                               {f: (v.guarantee, v.quota, v.limit) for f, v in q.quotas.items()})
                     for q in snapshot.queues),
    )
    services.load_cluster_spec(spec)
    t1 = time.perf_counter()
    queues = {q.name: (q.id, q.team_id) for q in Queue.objects.all()}
    jobs = []
    for j in snapshot.jobs:
        qid, tid = queues[j.queue]
        state = "pending" if j.state == "pending" else "running"
        jobs.append(Job(team_id=tid, queue_id=qid, name=str(j.name or j.id), priority=j.priority, state=state,
                        topology_mode=j.topology_mode, highest_tier=j.highest_tier,
                        submitted_at=EPOCH + timedelta(seconds=j.submit_time),
                        started_at=EPOCH if state == "running" else None))
    Job.objects.bulk_create(jobs, batch_size=2000)
    roles = []
    for j, row in zip(snapshot.jobs, jobs):
        for r in j.roles:
            roles.append(JobRole(job_id=row.id, name=r.name, tasks=r.tasks, gpus_per_task=r.gpus_per_task,
                                 min_available=r.min_available, flavor="|".join(r.flavors)))
    JobRole.objects.bulk_create(roles, batch_size=2000)
    role_of = {(r.job_id, r.name): r.id for r in roles}
    node_ids = dict(Node.objects.values_list("name", "id"))
    tasks, task_gpus = [], []
    for j, row in zip(snapshot.jobs, jobs):
        if j.state == "pending":
            for r in j.roles:
                tasks += [Task(job_id=row.id, role_id=role_of[(row.id, r.name)], index=i) for i in range(r.tasks)]
        else:
            for p in j.placement:
                tasks.append(Task(job_id=row.id, role_id=role_of[(row.id, p.role)], index=p.index, state="running",
                                  node_id=node_ids[p.node]))
                task_gpus.append((len(tasks) - 1, row.id, p.node, p.gpus))
    Task.objects.bulk_create(tasks, batch_size=5000)
    gpu_id = {(n, i): g for g, n, i in Gpu.objects.values_list("id", "node__name", "index")}
    allocs = [Allocation(task_id=tasks[ti].id, gpu_id=gpu_id[(node, g)], job_id=jid, created_at=EPOCH)
              for ti, jid, node, gpus in task_gpus for g in gpus]
    Allocation.objects.bulk_create(allocs, batch_size=5000)
    t2 = time.perf_counter()
    pending_ids = [row.id for j, row in zip(snapshot.jobs, jobs) if j.state == "pending"]
    return {"pending_ids": pending_ids, "seconds": {"cluster": t1 - t0, "jobs": t2 - t1},
            "rows": {"jobs": len(jobs), "tasks": len(tasks), "allocations": len(allocs)}}


def reset_pending(pending_ids: list[int]) -> None:
    """Undo a cycle's starts for the given jobs (delete their allocations and admission events, tasks
    and jobs back to pending, bound_at cleared), so the same cycle can be timed again on the same database."""
    from django.db import transaction

    from gpuplatform.models import Allocation, Event, Job, SchedulerCycle, Task

    with transaction.atomic():
        for i in range(0, len(pending_ids), 20000):
            ids = pending_ids[i:i + 20000]
            Allocation.objects.filter(job_id__in=ids).delete()
            Task.objects.filter(job_id__in=ids).update(state="pending", node=None)
            # bound_at too: the undone jobs' rows as they were read before the cycle (a bound_at left behind made
            # every undone job's row differ from the snapshot memo's, so a rerun rebuilt 10,000 JobInfos that a
            # production cycle reuses)
            Job.objects.filter(id__in=ids).update(state="pending", started_at=None, placement_domain="",
                                                  placement_tier=None, bound_at=None)
        Event.objects.filter(kind="admitted").delete()
        SchedulerCycle.objects.all().delete()
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")


def timed_cycle() -> dict:
    """One `store.run_cycle_once` on the bench database, timed (seconds): total wall, snapshot read, engine
    and apply (the rest: writes and commit), with the cycle's binds and pending count."""
    import gc
    import time

    from django.utils import timezone

    from gpuplatform.scheduling import store

    gc.collect()
    t0 = time.perf_counter()
    cycle = store.run_cycle_once(clock=timezone.now())
    total = time.perf_counter() - t0
    snapshot = cycle.timings.get("snapshot_ms", 0.0) / 1000
    engine = cycle.timings.get("total", 0.0)
    return {"total": total, "snapshot": snapshot, "engine": engine, "apply": total - snapshot - engine,
            "binds": cycle.binds, "pending": cycle.pending}
