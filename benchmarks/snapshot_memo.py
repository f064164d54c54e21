"""The snapshot read with and without store.SnapshotMemo, side by side in one process (issue 16): the headline world
of cycle_scale (20,160 GPUs, 10,000 pending, 5,000 running) loaded into a throw-away database (BENCH_DB names it),
then `store.build_snapshot` ROUNDS times without and with a warm memo, alternating, nothing written in between (the
steady state of jobs that wait or run across cycles: every JobInfo is reused). Prints process CPU and wall medians.

    BENCH_DB=<db> ROUNDS=4 python benchmarks/snapshot_memo.py
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import time

import _common as C
import _db


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "4"))
    world = C.scale_world(racks=280, pending=10_000, running=5_000)
    with _db.bench_database("bench_snapshot_memo"):
        _db.load_world(world)
        from django.db import connection

        from gpuplatform.scheduling import store

        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
        memo = store.SnapshotMemo()
        store.build_snapshot(memo=memo)
        res: dict[str, list] = {"without memo": [], "with memo": []}
        gc.disable()  # as run_cycle_once reads (store.cyclic_gc_paused)
        for _ in range(rounds):
            for name, m in (("without memo", None), ("with memo", memo)):
                c, w = time.process_time(), time.perf_counter()
                snap, _ = store.build_snapshot(memo=m)
                res[name].append((time.process_time() - c, time.perf_counter() - w))
        gc.enable()
        for name, xs in res.items():
            print(f"{name:13s} CPU median {statistics.median(x[0] for x in xs):.3f} s, wall median "
                  f"{statistics.median(x[1] for x in xs):.3f} s ({len(snap.jobs)} jobs, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    sys.exit(main())
