"""Where one end-to-end cycle's time goes, step by step (issue 16, session 10, branch e2e10): the headline world
loaded once, `store.run_cycle_once` run REPS times (the starts undone between runs, the first run with an empty
snapshot memo as cycle_scale.py's first run), each traced step's wall, this thread's CPU and the server process's
CPU (/proc/<backend pid>/stat: same machine).

    BENCH_DB=<db> WORLD=headline REPS=3 python benchmarks/e2e10_prof.py
    PROFILE=apply|snapshot|cycle: cProfile of that phase on the last run (top TOP=30 by SORT=tottime; SORT=cumulative
    for inclusive times)

Steps are inclusive (a step called inside another is counted in both); "commit" is the apply transaction's commit.
"""
from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time

import _db


def main() -> None:
    reps = int(os.environ.get("REPS", "3"))
    world = _db.ab_world(os.environ.get("WORLD", "headline"))
    with _db.bench_database("bench_e2e10_prof"):
        loaded = _db.load_world(world)
        import logging

        from django.db import connection

        import scheduler.core as core
        from gpuplatform import audit, bulk
        from gpuplatform.scheduling import evict, release, samples, store, usage_decay

        logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
        cpu = _db.backend_cpu
        acc: dict = {}
        prof = {"on": os.environ.get("PROFILE", ""), "p": None}

        def wrap(mod, attr, label=None):
            fn = getattr(mod, attr)
            label = label or attr

            def traced(*a, **k):
                w, c, s = time.perf_counter(), time.thread_time(), cpu()
                p = None
                if prof["on"] and label == prof["on"] and prof["last"]:
                    p = prof["p"] = cProfile.Profile()
                    p.enable()
                try:
                    return fn(*a, **k)
                finally:
                    if p is not None:
                        p.disable()
                    r = acc.setdefault(label, [0.0, 0.0, 0.0, 0])
                    r[0] += time.perf_counter() - w
                    r[1] += time.thread_time() - c
                    r[2] += cpu() - s
                    r[3] += 1
            setattr(mod, attr, traced)

        wrap(release, "release_expired")
        wrap(store, "build_snapshot", "snapshot")
        wrap(core, "run_cycle", "engine")
        wrap(store, "apply_result", "apply")
        wrap(store, "reserve_cycle")
        wrap(store, "rows_many", "reads (rows_many)")
        wrap(store, "_bind_all")
        wrap(store, "write_allocations")
        if hasattr(store, "write_allocation_batches"):  # session 11 (e2e11): the COPY fed batch by batch
            wrap(store, "write_allocation_batches")
            wrap(bulk.Together, "run", "together (pipeline)")
        wrap(store, "update_rows")
        wrap(store, "record_events")
        wrap(audit, "check_jobs")
        wrap(store, "_overlapped")
        wrap(evict, "apply_evictions")
        wrap(evict, "apply_holds")
        wrap(evict, "apply_withdrawals")
        wrap(store, "_apply_growths")
        wrap(store, "_update_pending")
        wrap(samples, "write_samples")
        wrap(store, "close_idle_queues")
        wrap(usage_decay, "record")
        wrap(bulk, "insert_rows", "insert_rows (COPY)")

        def hook_commit():
            commit = connection._commit

            def timed_commit():
                w, c, s = time.perf_counter(), time.thread_time(), cpu()
                try:
                    return commit()
                finally:
                    r = acc.setdefault("commit", [0.0, 0.0, 0.0, 0])
                    r[0] += time.perf_counter() - w
                    r[1] += time.thread_time() - c
                    r[2] += cpu() - s
                    r[3] += 1
            connection._commit = timed_commit

        runs = []
        for rep in range(reps):
            if rep:
                _db.reset_pending(loaded["pending_ids"])
            prof["last"] = rep == reps - 1
            acc.clear()
            connection.ensure_connection()
            hook_commit()
            r = _db.timed_cycle()
            runs.append((r, dict(acc)))
            print(f"rep {rep + 1} load {os.getloadavg()[0]:.1f}: total {r['total']:.3f} = snapshot {r['snapshot']:.3f} + "
                  f"engine {r['engine']:.3f} + apply {r['apply']:.3f}, binds {r['binds']}", flush=True)
            for k, (w, c, s, n) in acc.items():
                print(f"    {k:28s} x{n:<3d} wall {w:.3f}  client {c:.3f}  server {s:.3f}")
        if prof["p"] is not None:
            pstats.Stats(prof["p"]).sort_stats(os.environ.get("SORT", "tottime")).print_stats(int(os.environ.get("TOP", "30")))
        print("medians of runs 2..:")
        rest = runs[1:] or runs
        keys = list(rest[-1][1])
        for k in keys:
            vals = [a.get(k, [0, 0, 0, 0]) for _, a in rest]
            print(f"    {k:28s} wall {statistics.median(v[0] for v in vals):.3f}  client "
                  f"{statistics.median(v[1] for v in vals):.3f}  server {statistics.median(v[2] for v in vals):.3f}")


if __name__ == "__main__":
    sys.exit(main())
