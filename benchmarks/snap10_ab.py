"""The cycle's snapshot read, cold and warm, on the headline world (issue 16, session 10, branch snap10).

    BENCH_DB=<db> REPS=4 python benchmarks/snap10_ab.py

Loads the headline world (20,160 GPUs, 10,000 pending, 5,000 running) once, then per rep: store.build_snapshot with
an empty SnapshotMemo (cold: every JobInfo built, as the first cycle of a process) and again with that memo (warm);
wall, this process's CPU, the server process's CPU. The first cold read is the process's first (its type and query
caches empty), reported apart. Prints a digest of the snapshot (repr, `now` zeroed) to compare two trees' snapshots.
PROFILE=1: cProfile of one more cold read (top 25 by tottime), PROFILE=warm: of a warm one; the collector off (as in
run_cycle_once). NOGC=1: the timed reads with the collector off too.
"""
from __future__ import annotations

import cProfile
import dataclasses
import gc
import hashlib
import os
import pstats
import statistics
import sys
import time

import _db


def main() -> None:
    reps = int(os.environ.get("REPS", "4"))
    world = _db.ab_world(os.environ.get("WORLD", "headline"))
    with _db.bench_database("bench_snap10_ab"):
        _db.load_world(world)
        from django.db import connection

        from gpuplatform.scheduling import store

        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
        now = time.time()

        def one(memo):
            gc.collect()
            if os.environ.get("NOGC"):
                gc.disable()
            w, c, s = time.perf_counter(), time.process_time(), _db.backend_cpu()
            snap, _ = store.build_snapshot(now, memo=memo)
            gc.enable()
            if os.environ.get("MARKS"):
                mk = store._MK
                print("   " + " ".join(f"{n} {1000*(t - mk[i][1]):.0f}" for i, (n, t) in enumerate(mk[1:])))
            return snap, {"wall": time.perf_counter() - w, "client": time.process_time() - c,
                          "server": _db.backend_cpu() - s}

        digests = set()
        cold, warm = [], []
        for rep in range(reps + 1):
            memo = store.SnapshotMemo()
            snap, c = one(memo)
            _, wm = one(memo)
            digests.add(hashlib.sha256(repr(dataclasses.replace(snap, now=0.0)).encode()).hexdigest()[:16])
            label = "first" if rep == 0 else f"rep {rep}"
            print(f"{label:6s} load {os.getloadavg()[0]:.1f}: cold wall {c['wall']:.3f} client {c['client']:.3f} "
                  f"server {c['server']:.3f} | warm wall {wm['wall']:.3f} client {wm['client']:.3f} "
                  f"server {wm['server']:.3f}", flush=True)
            if rep:
                cold.append(c)
                warm.append(wm)
        print("snapshot digest:", sorted(digests))
        for name, rs in (("cold", cold), ("warm", warm)):
            print(f"median {name}: " + ", ".join(f"{k} {statistics.median(r[k] for r in rs):.3f}" for k in rs[0]))
        if os.environ.get("PROFILE"):
            prof = cProfile.Profile()
            memo = store.SnapshotMemo()
            if os.environ["PROFILE"] == "warm":
                store.build_snapshot(now, memo=memo)
            gc.collect()
            gc.disable()
            prof.enable()
            store.build_snapshot(now, memo=memo)
            prof.disable()
            gc.enable()
            st = pstats.Stats(prof)
            st.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
