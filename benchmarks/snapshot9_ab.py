"""The cycle's snapshot read side by side in one process (issue 16, session 9, branch e2e9b): store.build_snapshot
on the headline world (20,160 GPUs, 10,000 pending, 5,000 running), variants alternating on one loaded database.

    BENCH_DB=<db> REPS=8 python benchmarks/snapshot9_ab.py

Variants: `serial` = each query run and fetched in turn (bulk.rows one by one, as on main); `pipeline` = the code as it
is (the queries sent in one psycopg pipeline, bulk.rows_many). Per run: wall, client CPU, the server
process's CPU (/proc). CYCLE=1: whole cycles instead (store.run_cycle_once, the starts undone between runs), split
into snapshot, engine and apply. PROFILE=1: per query wall / client CPU / server CPU of one serial read.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import sys
import time

import _db


def main() -> None:
    reps = int(os.environ.get("REPS", "8"))
    names = os.environ.get("VARIANTS", "serial,pipeline").split(",")
    world = _db.ab_world(os.environ.get("WORLD", "headline"))
    with _db.bench_database("bench_snapshot9_ab"):
        _db.load_world(world)
        from django.db import connection

        from gpuplatform.scheduling import store

        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
        if os.environ.get("PROFILE"):
            from gpuplatform import bulk
            rows = bulk.rows

            def timed_rows(qs, fields, times=()):
                w, c, s = time.perf_counter(), time.process_time(), _db.backend_cpu()
                out = rows(qs, fields, times)
                print(f"  {len(out):6d} rows wall {time.perf_counter() - w:.4f} client {time.process_time() - c:.4f}"
                      f" server {_db.backend_cpu() - s:.3f} {qs.model.__name__} {fields[:3]}")
                return out
            store.rows_many = lambda *reads: [timed_rows(*r) for r in reads]
            for _ in range(2):
                t = time.perf_counter()
                store.build_snapshot(time.time(), memo=store.SnapshotMemo())
                print(f"total {time.perf_counter() - t:.3f}")
            store.rows_many = bulk.rows_many
        from gpuplatform import bulk

        pipelined = bulk.rows_many

        def serial(*reads):  # main's reads: bulk.rows one after the other
            return [bulk.rows(*r) for r in reads]
        if os.environ.get("CYCLE"):
            import logging

            logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
            from gpuplatform.models import Job
            loaded_ids = list(Job.objects.filter(state="pending").values_list("id", flat=True))
            cycles = {n: [] for n in names}
            _db.timed_cycle()  # warm-up: the snapshot memo filled, as in a run of cycles
            _db.reset_pending(loaded_ids)
            for rep in range(reps):
                for name in names:
                    store.rows_many = pipelined if name == "pipeline" else serial
                    r = _db.timed_cycle()
                    _db.reset_pending(loaded_ids)
                    cycles[name].append(r)
                    print(f"rep {rep + 1} {name:8s} load {os.getloadavg()[0]:.1f}: total {r['total']:.3f} = snapshot "
                          f"{r['snapshot']:.3f} + engine {r['engine']:.3f} + apply {r['apply']:.3f}, binds {r['binds']}",
                          flush=True)
            print("medians:")
            for name, rs in cycles.items():
                print(f"  {name:8s} " + ", ".join(f"{k} {statistics.median(r[k] for r in rs):.3f}"
                                                  for k in ("total", "snapshot", "engine", "apply")))
            return
        snap = {}
        results = {n: [] for n in names}
        for rep in range(reps):
            for name in names:
                store.rows_many = pipelined if name == "pipeline" else serial
                memo = store.SnapshotMemo()
                store.build_snapshot(time.time(), memo=memo)  # the memo warm, as in a run of cycles
                gc.collect()
                w, c, s = time.perf_counter(), time.process_time(), _db.backend_cpu()
                got, _ = store.build_snapshot(time.time(), memo=memo)
                row = {"wall": time.perf_counter() - w, "client": time.process_time() - c,
                       "server": _db.backend_cpu() - s}
                got = dataclasses.replace(got, now=0.0)
                snap.setdefault(name, repr(got))
                results[name].append(row)
                print(f"rep {rep + 1} {name:8s} load {os.getloadavg()[0]:.1f}: wall {row['wall']:.3f} client CPU "
                      f"{row['client']:.3f} server CPU {row['server']:.3f}", flush=True)
        print("same snapshot:", len(set(snap.values())) == 1)
        print("medians:")
        for name, rs in results.items():
            print(f"  {name:8s} " + ", ".join(f"{k} {statistics.median(r[k] for r in rs):.3f}" for k in rs[0]))


if __name__ == "__main__":
    sys.exit(main())
