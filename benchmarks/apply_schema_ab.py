"""The cycle's database writes on PostgreSQL under schema variants, side by side in one process (issue 16, the
database side of the apply): the headline world of cycle_scale (20,160 GPUs, 10,000 starts, 13,035 GPUs)
loaded once into a throw-away database (BENCH_DB names it), then per variant, alternating:

- MODE=micro (default): the apply's four bulk writes as plain SQL in one transaction that is rolled back
  (allocation INSERT of every pending task's GPUs, task UPDATE, job UPDATE, "admitted" event INSERT), then
  `SET CONSTRAINTS ALL IMMEDIATE`, which runs the deferred foreign-key checks the commit would run. Times
  per step, medians over REPS.
- MODE=cycle: `store.run_cycle_once` (the starts undone between runs by _db.reset_pending): the apply's wall
  time, its statements' summed time (COPY not included) and the commit's.

A variant is DDL applied before its run and undone after it, so every run starts from the migrated schema:
`base` (as migrated), `before_0021` (the indexes migration 0021_e2e2 dropped or made partial, back as they
were: the schema of 0020), `no_alloc_job_fk` (allocation.job_id's foreign key dropped; an experiment, not a
proposal of this script), `replica` (session_replication_role = replica: no foreign-key triggers at all, a
lower bound), `before_0025` (the indexes migration 0025_e2eschema dropped or made partial, back as they were: the
schema of 0024). MODE=cycle also prints the apply's server CPU (the backend process's, /proc: same machine).

    BENCH_DB=<db> MODE=micro REPS=7 VARIANTS=before_0021,base python benchmarks/apply_schema_ab.py
    BENCH_DB=<db> MODE=cycle REPS=6 VARIANTS=before_0025,base python benchmarks/apply_schema_ab.py

Wall times on a shared machine are noisy: compare within one run, alternating.
"""
from __future__ import annotations

import importlib
import os
import statistics
import sys
import time

import _common as C
import _db

# the migration module below reads Django's settings (AUTH_USER_MODEL): point them at the bench database first, or
# they are read with the default DATABASE_URL (SQLite) before bench_database can switch them (session 14)
os.environ["DATABASE_URL"] = f"{_db.SERVER_URL.rsplit('/', 1)[0]}/{_db.database_name('bench_apply_schema_ab')}"

# (do, undo): the schema of migration 0020 again, on a database migrated to 0021_e2e2 or later
_BEFORE_0021 = [
    (f"CREATE INDEX {name} ON {table} ({col})", f"DROP INDEX {name}")
    for name, table, col in [
        *importlib.import_module("gpuplatform.migrations.0021_e2e2")._DROPPED,  # the migration's own list
        ("gpuplatform_event_kind_4ab9056d_like", "gpuplatform_event", "kind varchar_pattern_ops"),
    ]
] + [
    ("DROP INDEX event_actor_set, event_queue_set, event_node_set, allocation_mig_instance_set",
     "CREATE INDEX event_actor_set ON gpuplatform_event (actor_id) WHERE actor_id IS NOT NULL; "
     "CREATE INDEX event_queue_set ON gpuplatform_event (queue_id) WHERE queue_id IS NOT NULL; "
     "CREATE INDEX event_node_set ON gpuplatform_event (node_id) WHERE node_id IS NOT NULL; "
     "CREATE INDEX allocation_mig_instance_set ON gpuplatform_allocation (mig_instance_id) "
     "WHERE mig_instance_id IS NOT NULL"),
    ("DROP INDEX allocation_one_live_per_mig_instance; CREATE UNIQUE INDEX allocation_one_live_per_mig_instance "
     "ON gpuplatform_allocation (mig_instance_id) WHERE released_at IS NULL",
     "DROP INDEX allocation_one_live_per_mig_instance; CREATE UNIQUE INDEX allocation_one_live_per_mig_instance "
     "ON gpuplatform_allocation (mig_instance_id) WHERE mig_instance_id IS NOT NULL AND released_at IS NULL"),
]
# the schema of migration 0024 again, on a database migrated to 0025_e2eschema or later (session 14)
_BEFORE_0025 = [
    ("DROP INDEX job_submitter_set; "
     "CREATE INDEX gpuplatform_job_submitter_id_50ab0661 ON gpuplatform_job (submitter_id)",
     "DROP INDEX gpuplatform_job_submitter_id_50ab0661; "
     "CREATE INDEX job_submitter_set ON gpuplatform_job (submitter_id) WHERE submitter_id IS NOT NULL"),
    ("CREATE INDEX gpuplatform_gpu_node_id_117319b6 ON gpuplatform_gpu (node_id)",
     "DROP INDEX gpuplatform_gpu_node_id_117319b6"),
    ("DROP INDEX event_kind_not_admitted; CREATE INDEX event_kind ON gpuplatform_event (kind)",
     "DROP INDEX event_kind; "
     "CREATE INDEX event_kind_not_admitted ON gpuplatform_event (kind) WHERE kind <> 'admitted'"),
]
_FK = "gpuplatform_allocation_job_id_4ca6c166_fk_gpuplatform_job_id"
VARIANTS = {
    "base": [],
    "before_0021": _BEFORE_0021,
    "no_alloc_job_fk": [(f"ALTER TABLE gpuplatform_allocation DROP CONSTRAINT {_FK}",
                         f"ALTER TABLE gpuplatform_allocation ADD CONSTRAINT {_FK} FOREIGN KEY (job_id) "
                         "REFERENCES gpuplatform_job (id) DEFERRABLE INITIALLY DEFERRED")],
    "replica": "replica",
    "before_0025": _BEFORE_0025,
}

# MODE=micro: the apply's writes as plain SQL over the loaded world (the GPUs: the free ones in id order)
_PLAN = """CREATE TEMP TABLE e2e2_plan AS
WITH t AS (SELECT t.id tid, t.job_id, r.gpus_per_task g FROM gpuplatform_task t
           JOIN gpuplatform_jobrole r ON r.id = t.role_id WHERE t.state = 'pending'),
e AS (SELECT tid, job_id, row_number() OVER (ORDER BY tid, s) rn FROM t, generate_series(1, t.g) s),
f AS (SELECT id, node_id, row_number() OVER (ORDER BY id) rn FROM gpuplatform_gpu
      WHERE id NOT IN (SELECT gpu_id FROM gpuplatform_allocation WHERE released_at IS NULL))
SELECT e.tid, f.id gid, f.node_id, e.job_id FROM e JOIN f USING (rn)"""
_STEPS = [
    ("allocations", "INSERT INTO gpuplatform_allocation (task_id, gpu_id, job_id, created_at, gpu_milli, gpu_memory_mib) "
                    "SELECT tid, gid, job_id, now(), 0, 0 FROM e2e2_plan"),
    ("tasks", "UPDATE gpuplatform_task t SET node_id = p.node_id, state = 'running' "
              "FROM (SELECT DISTINCT ON (tid) tid, node_id FROM e2e2_plan) p WHERE t.id = p.tid"),
    ("jobs", "UPDATE gpuplatform_job t SET placement_domain = 'r1', placement_tier = 1, state = 'running', "
             "started_at = now(), bound_at = now(), pending_reason = '', pending_reason_code = '', pending_position = NULL, "
             "queue_position = NULL, "
             "never_fits = false, reserved = NULL, estimated_start = NULL, not_before = NULL, estimated_start_p90 = NULL, "
             "estimate_note = '', reservation_start = NULL, updated_at = now() "
             "FROM (SELECT DISTINCT job_id FROM e2e2_plan) p WHERE t.id = p.job_id AND t.state = 'pending'"),
    ("events", "INSERT INTO gpuplatform_event (time, kind, job_id, cycle, message, data) SELECT now(), 'admitted', "
               "job_id, 1, 'admitted (fifo) into r1 (tier 1) on 1 node(s), 1 GPUs', "
               "'{\"domain\": \"r1\", \"tier\": 1, \"rule\": \"fifo\", \"placement\": [[\"worker\", 0, \"n1\", [0]]]}'::jsonb "
               "FROM (SELECT DISTINCT job_id FROM e2e2_plan) p"),
    ("fk_checks", "SET CONSTRAINTS ALL IMMEDIATE"),
]


def _apply(cur, variant, undo: bool = False) -> None:
    if variant == "replica":
        cur.execute(f"SET session_replication_role = {'DEFAULT' if undo else 'replica'}")
        return
    for do, und in (reversed(variant) if undo else variant):
        cur.execute(und if undo else do)


def micro(names, reps) -> None:
    from django.db import connection, transaction

    res = {n: {s: [] for s, _ in _STEPS} for n in names}
    with connection.cursor() as cur:
        cur.execute(_PLAN)
        cur.execute("ANALYZE e2e2_plan")
    for _ in range(reps):
        for name in names:
            with connection.cursor() as cur:
                try:
                    with transaction.atomic():
                        _apply(cur, VARIANTS[name])
                        for step, sql in _STEPS:
                            t = time.perf_counter()
                            cur.execute(sql)
                            res[name][step].append(time.perf_counter() - t)
                        raise _Rollback
                except _Rollback:
                    pass
                if VARIANTS[name] == "replica":
                    _apply(cur, "replica", undo=True)
    print(f"medians of {reps}, load {os.getloadavg()[0]:.1f}:")
    for name in names:
        med = {s: statistics.median(x) for s, x in res[name].items()}
        print(f"  {name:16s} total {sum(med.values()):.3f} = " + " + ".join(f"{s} {v:.3f}" for s, v in med.items()),
              flush=True)


class _Rollback(Exception):
    pass


def cycle(names, reps, loaded) -> None:
    from django.db import connection

    from gpuplatform.scheduling import store

    state: dict = {"statements": 0.0, "commit": 0.0, "server": 0.0}

    def timed(execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            state["statements"] += time.perf_counter() - t

    apply = store.apply_result

    def measured(*args, **kwargs):
        state.update(statements=0.0, commit=0.0)
        before = _db.backend_cpu()
        try:
            with _db.timed_commits(state), connection.execute_wrapper(timed):
                return apply(*args, **kwargs)
        finally:
            state["server"] = _db.backend_cpu() - before

    store.apply_result = measured
    results: dict[str, list] = {n: [] for n in names}
    first = True
    for rep in range(reps):
        for name in names:
            if not first:
                _db.reset_pending(loaded["pending_ids"])
            first = False
            with connection.cursor() as cur:
                _apply(cur, VARIANTS[name])
                cur.execute("ANALYZE")
            try:
                r = _db.timed_cycle()
            finally:
                with connection.cursor() as cur:
                    _apply(cur, VARIANTS[name], undo=True)
            results[name].append({"apply": r["apply"], "statements": state["statements"], "commit": state["commit"],
                                  "server": state["server"]})
            print(f"rep {rep + 1} {name:16s} load {os.getloadavg()[0]:.1f}: apply {r['apply']:.3f} (statements "
                  f"{state['statements']:.3f}, commit {state['commit']:.3f}, server CPU {state['server']:.3f}), "
                  f"binds {r['binds']}", flush=True)
    print("medians:")
    for name, rows in results.items():
        print(f"  {name:16s} " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.3f}"
                                           for k in ("apply", "statements", "commit", "server")))


def main() -> None:
    mode = os.environ.get("MODE", "micro")
    reps = int(os.environ.get("REPS", "5"))
    names = os.environ.get("VARIANTS", "before_0021,base").split(",")
    world = C.scale_world(racks=280, pending=10_000, running=5_000)
    with _db.bench_database("bench_apply_schema_ab"):
        loaded = _db.load_world(world)
        import logging

        logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
        if mode == "micro":
            micro(names, reps)
        else:
            cycle(names, reps, loaded)


if __name__ == "__main__":
    sys.exit(main())
