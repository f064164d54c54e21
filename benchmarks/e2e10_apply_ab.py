"""The cycle's apply side by side, on one engine result (issue 16, session 10, branch e2e10): the headline world
loaded once, one snapshot and one engine run, then `store.apply_result` of that same result again and again in a
transaction that is rolled back (VACUUM between runs, untimed), alternating variants.

    BENCH_DB=<db> WORLD=headline REPS=5 VARIANTS=base,new python benchmarks/e2e10_apply_ab.py
    STATEMENTS=1: the server CPU and wall per statement kind (execute_wrapper: COPY is not seen there)

Per run: the apply's wall, this process's CPU (all threads) and the server process's CPU (/proc), up to and with
`SET CONSTRAINTS ALL IMMEDIATE` (the deferred foreign-key checks the commit would run); the rollback and the commit's
WAL flush are not in the figures. Variants (VARIANT_PATCHES below): `base` = the code as it is with the e2e10 switches off, `new` =
the code as it is; `nofk` = the code as it is with allocation.gpu_id's and task.node_id's foreign keys dropped inside
the rolled-back run (an experiment: what those two constraints' row-by-row checks cost); `gpufk` = the code as it is
with allocation.gpu_id's constraint back (NOT VALID, added inside the rolled-back run) and allocations.check_gpus off,
i.e. the GPU checked as before migration 0024_e2e10; `fks` = the same for the GPU and the node (allocations.check_nodes
off too): both as before 0024_e2e10; `nothread` = the code as it is with the Events formatted in this thread
after the task update (store.PARALLEL_FORMAT_MIN out of reach).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import _db


_DROP_GPU_NODE_FKS = (
    "ALTER TABLE gpuplatform_allocation DROP CONSTRAINT IF EXISTS gpuplatform_allocation_gpu_id_3d3081fb_fk_gpuplatform_gpu_id; "
    "ALTER TABLE gpuplatform_task DROP CONSTRAINT IF EXISTS gpuplatform_task_node_id_7a1932d5_fk_gpuplatform_node_id")


_ADD_GPU_FK = ("ALTER TABLE gpuplatform_allocation ADD CONSTRAINT gpuplatform_allocation_gpu_id_3d3081fb_fk_gpuplatform_gpu_id "
               "FOREIGN KEY (gpu_id) REFERENCES gpuplatform_gpu (id) DEFERRABLE INITIALLY DEFERRED NOT VALID")

_ADD_NODE_FK = ("ALTER TABLE gpuplatform_task ADD CONSTRAINT gpuplatform_task_node_id_7a1932d5_fk_gpuplatform_node_id "
                "FOREIGN KEY (node_id) REFERENCES gpuplatform_node (id) DEFERRABLE INITIALLY DEFERRED NOT VALID")


class _Rollback(Exception):
    pass


def _switches(name: str) -> None:
    """The e2e10 changes that can be turned off in one process (store.E2E10): off for `base`, on otherwise."""
    from gpuplatform.scheduling import store

    flags = getattr(store, "E2E10", None)
    if flags is None:
        return
    for k in flags:
        flags[k] = name != "base" and (name == "new" or k in name.split("+"))


def main() -> None:
    reps = int(os.environ.get("REPS", "5"))
    names = os.environ.get("VARIANTS", "base,new").split(",")
    world = _db.ab_world(os.environ.get("WORLD", "headline"))
    with _db.bench_database("bench_e2e10_apply_ab"):
        _db.load_world(world)
        import logging

        from django.db import connection, transaction

        from gpuplatform.scheduling import store

        logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
        clock, result = _db.one_engine_result()
        cpu = _db.backend_cpu
        by: dict = {}

        def timed(execute, sql, params, many, context):
            w, c = time.perf_counter(), cpu()
            try:
                return execute(sql, params, many, context)
            finally:
                key = " ".join(sql[:70].split())
                r = by.setdefault(key, [0.0, 0.0])
                r[0] += time.perf_counter() - w
                r[1] += cpu() - c

        check_gpus, check_nodes = getattr(store, "check_gpus", None), getattr(store, "check_nodes", None)
        parallel_min = store.PARALLEL_FORMAT_MIN
        res = {n: [] for n in names}
        for rep in range(reps):
            for name in names:
                _switches(name)
                with connection.cursor() as cur:
                    cur.execute("VACUUM")
                by.clear()
                try:
                    with transaction.atomic():
                        if name == "nofk":  # experiment: the GPU and node keys dropped inside the rolled-back run
                            with connection.cursor() as cur:
                                cur.execute(_DROP_GPU_NODE_FKS)
                        store.PARALLEL_FORMAT_MIN = 10**9 if name == "nothread" else parallel_min
                        if name in ("gpufk", "fks"):  # before 0024_e2e10: the GPU's (node's) constraint, no bulk check
                            with connection.cursor() as cur:
                                cur.execute(_ADD_GPU_FK)
                                if name == "fks":
                                    cur.execute(_ADD_NODE_FK)
                            store.check_gpus = lambda rows: None
                            if name == "fks":
                                store.check_nodes = lambda ids: None
                        w, c, s = time.perf_counter(), time.process_time(), cpu()
                        if os.environ.get("STATEMENTS"):
                            with connection.execute_wrapper(timed):
                                stats = store.apply_result(result, clock=clock, cycle_number=1)
                        else:
                            stats = store.apply_result(result, clock=clock, cycle_number=1)
                        with connection.cursor() as cur:  # what the commit would check (deferred keys)
                            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
                        wall, ccpu, scpu = time.perf_counter() - w, time.process_time() - c, cpu() - s
                        raise _Rollback
                except _Rollback:
                    pass
                finally:
                    store.check_gpus, store.check_nodes = check_gpus, check_nodes
                res[name].append((wall, ccpu, scpu))
                print(f"rep {rep + 1} {name:10s} load {os.getloadavg()[0]:.1f}: apply wall {wall:.3f} client CPU "
                      f"{ccpu:.3f} server CPU {scpu:.3f} binds {stats.binds}", flush=True)
                for k, (sw, sc) in sorted(by.items(), key=lambda kv: -kv[1][0])[:12]:
                    print(f"      wall {sw:.3f} server {sc:.3f}  {k}")
        _switches("new")
        print("medians (wall, client CPU, server CPU):")
        for name, rs in res.items():
            print(f"  {name:10s} " + "  ".join(f"{statistics.median(r[i] for r in rs):.3f}" for i in range(3)))


if __name__ == "__main__":
    sys.exit(main())
