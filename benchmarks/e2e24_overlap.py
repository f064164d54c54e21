"""The best case of overlapping the engine with the apply's writes (issue 16, session 24; RESULTS.md "Where the
end-to-end cycle's last 0.3 s would have to come from"): on the headline world (20,160 GPUs, 10,000 starts), the
engine run in this thread while a worker thread applies an already-decided result of the same size on its own
connection, against the two one after the other, REPS pairs (the starts undone between runs).

    BENCH_DB=<db> SWITCH=0.005 REPS=3 python benchmarks/e2e24_overlap.py

SWITCH: sys.setswitchinterval (seconds) during the runs. A real stream of bindings would do no better: this one
starts the apply with every decision known.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time

import _db


def main() -> None:
    with _db.bench_database("bench_e2e24_overlap"):
        _db.load_world(_db.ab_world("headline"))
        from django.db import connections
        from django.utils import timezone

        from gpuplatform.scheduling import store, usage_decay
        from scheduler.core import run_cycle

        clock, result = _db.one_engine_result()
        snapshot, _ = store.build_snapshot(timezone.now().timestamp(), cycle=1, memo=store.SnapshotMemo())
        config = usage_decay.default_config()
        started = [b.job_id for b in result.bindings]

        def engine() -> float:
            t = time.perf_counter()
            run_cycle(snapshot, config, cache=store.ENGINE_CACHE)
            return time.perf_counter() - t

        def apply() -> float:
            t = time.perf_counter()
            store.apply_result(result, clock=clock, cycle_number=1)
            return time.perf_counter() - t

        gc.disable()
        sys.setswitchinterval(float(os.environ.get("SWITCH", "0.005")))
        for _ in range(int(os.environ.get("REPS", "3"))):
            alone_engine, alone_apply = engine(), apply()
            _db.reset_pending(started)
            box: dict = {}

            def worker() -> None:
                try:
                    box["apply"] = apply()
                finally:
                    connections.close_all()  # this thread's connection

            t0 = time.perf_counter()
            thread = threading.Thread(target=worker)
            thread.start()
            together_engine = engine()
            thread.join()
            wall = time.perf_counter() - t0
            _db.reset_pending(started)
            print(f"alone: engine {alone_engine:.3f} + apply {alone_apply:.3f} = {alone_engine + alone_apply:.3f} s | "
                  f"together: engine {together_engine:.3f}, apply {box['apply']:.3f}, wall {wall:.3f} s", flush=True)


if __name__ == "__main__":
    main()
