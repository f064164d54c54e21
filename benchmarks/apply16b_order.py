"""The order of the apply's bulk writes and its foreign-key checks, as plain SQL side by side (issue 16, branch apply16b):
the headline world loaded into a throw-away database (BENCH_DB), then per order, alternating, in a transaction that is
rolled back: lock the pending jobs FOR NO KEY UPDATE (as _bind_all does), then the steps in the order given; `fk` is
`SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED` (the deferred checks queued so far run there), and a
last `fk` stands for the commit's. Prints per order the median total and steps.

    BENCH_DB=<db> REPS=5 [ORDERS=now,branch] python benchmarks/apply16b_order.py
    BENCH_DB=<db> REPS=5 FK_COSTS=1 python benchmarks/apply16b_order.py   # this branch's order with some foreign
                                       # keys dropped inside the rolled-back transaction: what each costs (experiment)
    FK_COSTS=all: each foreign key a start checks dropped alone, and none at all (session_replication_role =
    replica, a lower bound; on main's schema); FK_COSTS=e2e9: main's checks against migration 0023_e2e9's bulk
    checks (session 9; on this branch's schema)
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import _common as C
import _db
STEP = {}
STEP["lock"] = ("SELECT id FROM gpuplatform_job WHERE id IN (SELECT DISTINCT job_id FROM e2e2_plan) "
                "AND state = 'pending' ORDER BY id FOR NO KEY UPDATE")
STEP["fk"] = "SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED"
# experiments only (inside the rolled-back transaction): what some foreign keys cost, by dropping them for the run
STEP["drop_event_null_fks"] = ("ALTER TABLE gpuplatform_event DROP CONSTRAINT gpuplatform_event_actor_id_b728e953_fk_auth_user_id, "
                               "DROP CONSTRAINT gpuplatform_event_node_id_41fd425e_fk_gpuplatform_node_id, "
                               "DROP CONSTRAINT gpuplatform_event_queue_id_2520d37e_fk_gpuplatform_queue_id")
STEP["drop_alloc_job_fk"] = ("ALTER TABLE gpuplatform_allocation DROP CONSTRAINT "
                             "gpuplatform_allocation_job_id_4ca6c166_fk_gpuplatform_job_id")
STEP["drop_alloc_mig_fk"] = ("ALTER TABLE gpuplatform_allocation DROP CONSTRAINT "
                             "gpuplatform_allocati_mig_instance_id_7d12585d_fk_gpuplatfo")
STEP["drop_alloc_task_fk"] = ("ALTER TABLE gpuplatform_allocation DROP CONSTRAINT "
                              "gpuplatform_allocation_task_id_5eb731c7_fk_gpuplatform_task_id")
STEP["drop_alloc_gpu_fk"] = ("ALTER TABLE gpuplatform_allocation DROP CONSTRAINT "
                             "gpuplatform_allocation_gpu_id_3d3081fb_fk_gpuplatform_gpu_id")
STEP["drop_task_node_fk"] = "ALTER TABLE gpuplatform_task DROP CONSTRAINT gpuplatform_task_node_id_7a1932d5_fk_gpuplatform_node_id"
STEP["drop_event_job_fk"] = "ALTER TABLE gpuplatform_event DROP CONSTRAINT gpuplatform_event_job_id_8f49d8d2_fk_gpuplatform_job_id"
# FK_COSTS=e2e9 (on this branch's schema): main's three constraints that migration 0023_e2e9 dropped, back for a run,
# and the same references checked by one statement each, as store._bind_all does (lock_tasks here without the
# task's job: the plan's job ids are the tasks' own)
STEP["add_e2e9_fks"] = "; ".join(
    f"ALTER TABLE {t} ADD CONSTRAINT {c} FOREIGN KEY ({col}) REFERENCES {ref} (id) DEFERRABLE INITIALLY DEFERRED NOT VALID"
    for t, c, col, ref in [
        ("gpuplatform_allocation", "gpuplatform_allocation_task_id_5eb731c7_fk_gpuplatform_task_id", "task_id", "gpuplatform_task"),
        ("gpuplatform_allocation", "gpuplatform_allocation_job_id_4ca6c166_fk_gpuplatform_job_id", "job_id", "gpuplatform_job"),
        ("gpuplatform_event", "gpuplatform_event_job_id_8f49d8d2_fk_gpuplatform_job_id", "job_id", "gpuplatform_job")])
STEP["lock_tasks"] = ("SELECT count(*) FROM (SELECT 1 FROM gpuplatform_task WHERE id = ANY(ARRAY(SELECT DISTINCT tid FROM "
                      "e2e2_plan)) FOR KEY SHARE) s")
STEP["lock_jobs"] = ("SELECT count(*) FROM (SELECT 1 FROM gpuplatform_job WHERE id = ANY(ARRAY(SELECT DISTINCT job_id FROM "
                     "e2e2_plan)) FOR KEY SHARE) s")
STEP["replica"] = "SET LOCAL session_replication_role = replica"  # no foreign-key trigger at all: a lower bound
ORDERS = {
    "now": ["lock", "allocations", "tasks", "jobs", "events", "fk"],
    "checks_before_job_update": ["lock", "allocations", "events", "fk", "tasks", "jobs", "fk"],
    "alloc_checks_first": ["lock", "allocations", "fk", "tasks", "jobs", "events", "fk"],
    "branch": ["lock", "allocations", "fk", "tasks", "events", "fk", "jobs", "fk"],  # store._bind_all now
}
if os.environ.get("ORDERS"):  # ORDERS=now,branch
    ORDERS = {k: ORDERS[k] for k in os.environ["ORDERS"].split(",")}
if os.environ.get("FK_COSTS"):  # what the foreign keys cost, the order of this branch
    base = ["lock", "allocations", "fk", "tasks", "events", "fk", "jobs", "fk"]
    ORDERS = {"branch": base, "no_event_null_fks": ["drop_event_null_fks"] + base,
              "no_alloc_job_fk": ["drop_alloc_job_fk"] + base, "no_alloc_mig_fk": ["drop_alloc_mig_fk"] + base}
    if os.environ["FK_COSTS"] == "all":  # each foreign key the starts check, dropped alone, and none at all (session 9, e2e9)
        ORDERS = {"branch": base, **{f"no_{k[5:]}": [k] + base for k in (
            "drop_alloc_job_fk", "drop_alloc_task_fk", "drop_alloc_gpu_fk", "drop_task_node_fk", "drop_event_job_fk")},
            "replica": ["replica"] + base}
    if os.environ["FK_COSTS"] == "e2e9":  # main's checks against migration 0023_e2e9's bulk checks
        # On a database migrated to 0023_e2e9 (this branch on): `main` = the three constraints added back (NOT VALID:
        # the rows there are not re-checked; new rows are, row by row, as on main) with main's order; e2e9 = the
        # bulk checks of store._bind_all. (The drop_* steps above need main's schema: run FK_COSTS=all from main.)
        ORDERS = {"main": ["add_e2e9_fks"] + base,
                  "e2e9": ["lock", "allocations", "fk", "lock_tasks", "tasks", "events", "lock_jobs", "fk", "jobs",
                           "fk"]}


def main() -> None:
    reps = int(os.environ.get("REPS", "5"))
    world = C.scale_world(racks=280, pending=10_000, running=5_000)
    with _db.bench_database("bench_apply16b_order"):
        _db.load_world(world)
        from django.db import connection, transaction

        from apply_schema_ab import _PLAN, _STEPS, _Rollback  # after the database is set up (it imports a migration)

        STEP.update(_STEPS)
        with connection.cursor() as cur:
            cur.execute(_PLAN)
            cur.execute("ANALYZE e2e2_plan")
            cur.execute("VACUUM ANALYZE")
        res = {n: [] for n in ORDERS}
        for _ in range(reps):
            for name, steps in ORDERS.items():
                times = []
                with connection.cursor() as cur:
                    try:
                        with transaction.atomic():
                            for step in steps:
                                t = time.perf_counter()
                                cur.execute(STEP[step])
                                times.append(time.perf_counter() - t)
                            raise _Rollback
                    except _Rollback:
                        pass
                res[name].append(times)
                print(f"{name:26s} total {sum(times):.3f} = " + " + ".join(f"{s} {t:.3f}" for s, t in zip(steps, times)),
                      flush=True)
        print(f"medians of {reps}, load {os.getloadavg()[0]:.1f}:")
        for name, steps in ORDERS.items():
            med = [statistics.median(r[i] for r in res[name]) for i in range(len(steps))]
            print(f"  {name:26s} total {statistics.median(sum(r) for r in res[name]):.3f} = "
                  + " + ".join(f"{s} {t:.3f}" for s, t in zip(steps, med)))


if __name__ == "__main__":
    sys.exit(main())
