"""The cycle's apply of one engine result, this tree's store.py against another tree's, alternating in one process
(issue 16, session 11, branch e2e11): the headline world loaded once, one snapshot and one engine run, then
`apply_result` of that result again and again in a transaction that is rolled back (VACUUM between runs, untimed).

    BENCH_DB=<db> WORLD=headline REPS=6 BASE=/tmp/base/platform/gpuplatform/scheduling/store.py \\
        python benchmarks/e2e11_apply_ab.py

Per run: the apply's wall, this process's CPU (all threads: the Events' worker too), the server process's CPU
(/proc), up to and with `SET CONSTRAINTS ALL IMMEDIATE` (the deferred checks the commit would run); the rollback and
the commit's WAL flush are not in the figures. BASE's store.py is loaded as a second module (it imports this tree's
other modules: bulk, allocations, audit); without BASE only this tree's runs. `GC=1`: the cyclic collector on.
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import time

import _db


class _Rollback(Exception):
    pass


def main() -> None:
    reps = int(os.environ.get("REPS", "6"))
    world = _db.ab_world(os.environ.get("WORLD", "headline"))
    with _db.bench_database("bench_e2e11_apply_ab"):
        _db.load_world(world)
        import logging

        from django.db import connection, transaction

        from gpuplatform.scheduling import store

        variants = _db.store_variants()
        logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
        if os.environ.get("FILLFACTOR"):  # experiment: job and task pages with room for an update's new version
            with connection.cursor() as cur:
                for table in ("gpuplatform_job", "gpuplatform_task"):
                    cur.execute(f"ALTER TABLE {table} SET (fillfactor = {int(os.environ['FILLFACTOR'])})")
                    cur.execute(f"VACUUM FULL {table}")
        clock, result = _db.one_engine_result()
        cpu = _db.backend_cpu
        drop = [x for x in os.environ.get("DROP", "").split(",") if x]
        if drop:  # experiment: this tree's apply with these indexes dropped inside the rolled-back run
            variants = {"this": store, "drop": store}
        res = {n: [] for n in variants}
        for rep in range(reps):
            order = list(variants.items()) if rep % 2 == 0 else list(variants.items())[::-1]
            for name, mod in order:
                with connection.cursor() as cur:
                    cur.execute("VACUUM")
                gc.collect()
                if not os.environ.get("GC"):
                    gc.disable()
                try:
                    with transaction.atomic():
                        with connection.cursor() as cur:
                            for index in drop if name == "drop" else ():
                                cur.execute(f'DROP INDEX "{index}"')
                            cur.execute("SELECT pg_current_wal_insert_lsn()")
                            lsn = cur.fetchone()[0]
                        w, c, s = time.perf_counter(), time.process_time(), cpu()
                        stats = mod.apply_result(result, clock=clock, cycle_number=1)
                        with connection.cursor() as cur:  # what the commit would check (deferred keys)
                            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
                        wall, ccpu, scpu = time.perf_counter() - w, time.process_time() - c, cpu() - s
                        with connection.cursor() as cur:
                            cur.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", [lsn])
                            wal = int(cur.fetchone()[0])
                            cur.execute("SELECT pg_current_wal_insert_lsn()")
                            lsn_end = cur.fetchone()[0]
                        raise _Rollback
                except _Rollback:
                    pass
                gc.enable()
                if os.environ.get("WALSTATS") and rep == 0:
                    with connection.cursor() as cur:
                        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
                        cur.execute("SELECT txid_current()")  # a commit: the WAL flushed past lsn_end
                        cur.execute("SELECT \"resource_manager/record_type\", count, record_size, fpi_size, "
                                    "combined_size FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, true) "
                                    "ORDER BY combined_size DESC LIMIT 12", [lsn, lsn_end])
                        for row in cur.fetchall():
                            print(f"      WAL {row[0]:32s} n={row[1]:7d} records {row[2] / 2**20:6.2f} MiB "
                                  f"FPI {row[3] / 2**20:6.2f} MiB")
                res[name].append((wall, ccpu, scpu))
                print(f"rep {rep + 1} {name:5s} load {os.getloadavg()[0]:.1f}: apply wall {wall:.3f} client CPU "
                      f"{ccpu:.3f} server CPU {scpu:.3f} WAL {wal / 2**20:.1f} MiB binds {stats.binds}", flush=True)
        print("medians (wall, client CPU, server CPU):")
        for name, rs in res.items():
            print(f"  {name:5s} " + "  ".join(f"{statistics.median(r[i] for r in rs):.3f}" for i in range(3)))
        if len(res) == 2:
            a, b = list(res)
            pairs = list(zip(res[a], res[b]))
            print(f"  {b} faster (wall) in {sum(y[0] < x[0] for x, y in pairs)} of {len(pairs)} pairs; "
                  f"server CPU lower in {sum(y[2] < x[2] for x, y in pairs)}, process CPU lower in "
                  f"{sum(y[1] < x[1] for x, y in pairs)}")


if __name__ == "__main__":
    sys.exit(main())
