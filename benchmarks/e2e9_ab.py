"""Migration 0023_e2e9 side by side in one process (issue 16, session 9, branch e2e9): the three foreign-key
constraints (allocation.task_id / job_id, event.job_id) checked row by row by PostgreSQL, as on main,
against the writers' bulk checks (bulk.lock_keys), on one loaded database, alternating.

    BENCH_DB=<db> WORLD=headline REPS=4 python benchmarks/e2e9_ab.py

WORLD=headline: cycle_scale's world (20,160 GPUs, 10,000 pending one-task jobs, 5,000 running; 10,000 starts on
13,035 GPUs); WORLD=bind: bind_throughput's (20,000 one-GPU starts). Variants: `fk` = the constraints added back
(DEFERRABLE INITIALLY DEFERRED, as main has them; NOT VALID: the rows already there are not re-checked) and the
bulk checks turned off, i.e. main's checks; `e2e9` = the code as it is. Per run: the cycle's split (snapshot,
engine, apply), the apply's client CPU and its server process's CPU (/proc/<backend pid>/stat: same machine).
Wall times on a shared machine are noisy: compare within one run, alternating; the server CPU is the steadier.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import _db

_FKS = [("gpuplatform_allocation", "gpuplatform_allocation_task_id_5eb731c7_fk_gpuplatform_task_id", "task_id",
         "gpuplatform_task"),
        ("gpuplatform_allocation", "gpuplatform_allocation_job_id_4ca6c166_fk_gpuplatform_job_id", "job_id",
         "gpuplatform_job"),
        ("gpuplatform_event", "gpuplatform_event_job_id_8f49d8d2_fk_gpuplatform_job_id", "job_id", "gpuplatform_job")]


def _variant(name, cur, undo=False):
    """Apply (or undo) a variant: DDL and monkeypatches."""
    from gpuplatform import allocations, audit
    from gpuplatform.scheduling import store

    if name != "fk":
        return
    for table, con, col, ref in _FKS:
        cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT {con}" if undo else
                    f"ALTER TABLE {table} ADD CONSTRAINT {con} FOREIGN KEY ({col}) REFERENCES {ref} (id) "
                    "DEFERRABLE INITIALLY DEFERRED NOT VALID")
    if undo:
        for mod, attr, value in _variant.saved:
            setattr(mod, attr, value)
        return
    _variant.saved = [(allocations, "check_references", allocations.check_references),
                      (store, "check_references", store.check_references), (audit, "check_jobs", audit.check_jobs)]
    for mod, attr, _ in _variant.saved:
        setattr(mod, attr, lambda *a, **k: None)


def main() -> None:
    reps = int(os.environ.get("REPS", "4"))
    names = os.environ.get("VARIANTS", "fk,e2e9").split(",")
    world = _db.ab_world(os.environ.get("WORLD", "headline"))
    with _db.bench_database("bench_e2e9_ab"):
        loaded = _db.load_world(world)
        import logging

        from django.db import connection

        from gpuplatform.scheduling import store

        logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")

        backend_cpu = _db.backend_cpu
        state = {}
        apply = store.apply_result

        def timed(execute, sql, params, many, context):  # STATEMENTS=1: server CPU per statement kind
            c = backend_cpu()
            try:
                return execute(sql, params, many, context)
            finally:
                by = state.setdefault("by", {})
                by[sql[:60]] = by.get(sql[:60], 0.0) + backend_cpu() - c

        def measured(*args, **kwargs):
            state["by"] = {}
            s0, c0 = backend_cpu(), time.process_time()
            try:
                if os.environ.get("STATEMENTS"):
                    with connection.execute_wrapper(timed):
                        return apply(*args, **kwargs)
                return apply(*args, **kwargs)
            finally:
                state["cpu"], state["server"] = time.process_time() - c0, backend_cpu() - s0

        store.apply_result = measured
        results = {n: [] for n in names}
        first = True
        for rep in range(reps):
            for name in names:
                if not first:
                    _db.reset_pending(loaded["pending_ids"])
                first = False
                with connection.cursor() as cur:
                    _variant(name, cur)
                try:
                    r = _db.timed_cycle()
                finally:
                    with connection.cursor() as cur:
                        _variant(name, cur, undo=True)
                row = {k: r[k] for k in ("total", "snapshot", "engine", "apply")} | {"cpu": state["cpu"],
                                                                                      "server": state["server"]}
                results[name].append(row)
                print(f"rep {rep + 1} {name:5s} load {os.getloadavg()[0]:.1f}: total {r['total']:.3f} = snapshot "
                      f"{r['snapshot']:.3f} + engine {r['engine']:.3f} + apply {r['apply']:.3f} (apply client CPU "
                      f"{state['cpu']:.3f}, server CPU {state['server']:.2f}), binds {r['binds']}", flush=True)
                for k, v in sorted(state["by"].items(), key=lambda kv: -kv[1])[:8]:
                    print(f"    server CPU {v:.2f} {k}")
        print("medians:")
        for name, rows in results.items():
            print(f"  {name:5s} " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.3f}" for k in rows[0]))


if __name__ == "__main__":
    sys.exit(main())
