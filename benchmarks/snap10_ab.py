"""The cycle's snapshot read, cold and warm, on the headline world (issue 16, session 10, branch snap10).

    BENCH_DB=<db> REPS=4 python benchmarks/snap10_ab.py
    BENCH_DB=<db> REPS=8 BASE=/tmp/base/platform/gpuplatform/scheduling/store.py python benchmarks/snap10_ab.py

Loads the headline world (20,160 GPUs, 10,000 pending, 5,000 running) once, then per rep: store.build_snapshot with
an empty SnapshotMemo (cold: every JobInfo built, as the first cycle of a process) and again with that memo (warm);
wall, this process's CPU, the server process's CPU; the cyclic collector off during each read (as in
run_cycle_once; GC=1 leaves it on). The first rep is the process's first read (its caches empty), reported apart.
BASE: another tree's store.py, loaded as a second module, read alternately with this tree's in each rep (A B A B in
one process, on one database: the box's load hits both alike); the ratios of the medians are printed. Prints a
digest of each variant's snapshots (repr, `now` zeroed): equal digests = equal snapshots, every field.
PROFILE=cold|warm: cProfile of one more read of this tree's (top 25 by tottime).
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

        variants = _db.store_variants()
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
        now = time.time()
        gc_on = bool(os.environ.get("GC"))

        def one(mod, memo):
            gc.collect()
            if not gc_on:
                gc.disable()
            w, c, s = time.perf_counter(), time.process_time(), _db.backend_cpu()
            snap, _ = mod.build_snapshot(now, memo=memo)
            row = {"wall": time.perf_counter() - w, "client": time.process_time() - c, "server": _db.backend_cpu() - s}
            gc.enable()
            return snap, row

        digests = {n: set() for n in variants}
        cold = {n: [] for n in variants}
        warm = {n: [] for n in variants}
        for rep in range(reps + 1):
            for name, mod in variants.items():
                memo = mod.SnapshotMemo()
                snap, c = one(mod, memo)
                _, wm = one(mod, memo)
                digests[name].add(hashlib.sha256(repr(dataclasses.replace(snap, now=0.0)).encode()).hexdigest()[:16])
                label = "first" if rep == 0 else f"rep {rep}"
                print(f"{label:6s} {name:4s} load {os.getloadavg()[0]:4.1f}: cold wall {c['wall']:.3f} client "
                      f"{c['client']:.3f} server {c['server']:.3f} | warm wall {wm['wall']:.3f} client "
                      f"{wm['client']:.3f} server {wm['server']:.3f}", flush=True)
                if rep:
                    cold[name].append(c)
                    warm[name].append(wm)
        print("snapshot digests:", {n: sorted(d) for n, d in digests.items()})
        med = {}
        for kind, runs in (("cold", cold), ("warm", warm)):
            for name, rs in runs.items():
                med[(kind, name)] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                print(f"median {kind} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in med[(kind, name)].items()))
            if "base" in variants:
                print(f"ratio {kind} this/base: " + ", ".join(
                    f"{k} {med[(kind, 'this')][k] / med[(kind, 'base')][k]:.2f}" for k in ("wall", "client")))
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
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
