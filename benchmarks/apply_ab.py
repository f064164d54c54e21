"""The cycle's apply with id lists as IN (...) placeholders vs one ANY(array) parameter, side by side in one
process (issue 16): the headline world of cycle_scale (20,160 GPUs, 10,000 starts) loaded once into a
throw-away PostgreSQL database (BENCH_DB names it), then `store.run_cycle_once` REPS times, the starts undone
between runs (_db.reset_pending), alternating the two renderings of gpuplatform.bulk.AnyOf (`__any`): even
runs as before (one placeholder per id), odd runs as now. Prints per run the split (snapshot, engine,
apply) and the apply's process CPU, then the summed wall time of each SQL statement per variant.

    BENCH_DB=<db> REPS=4 python benchmarks/apply_ab.py

Wall times on a shared machine are noisy: compare the apply's CPU and the statement times within one run.
"""
from __future__ import annotations

import os
import sys
import time

import _common as C
import _db


def main() -> None:
    reps = int(os.environ.get("REPS", "4"))
    world = C.scale_world(racks=280, pending=10_000, running=5_000)
    with _db.bench_database("bench_apply_ab"):
        loaded = _db.load_world(world)
        from django.db import connection

        from gpuplatform import bulk
        from gpuplatform.scheduling import store

        now_sql = bulk.AnyOf.as_sql

        def before_sql(self, compiler, conn):  # every id its own placeholder, as `__in` renders it
            lhs, params = self.process_lhs(compiler, conn)
            values = list(self.rhs)
            return (f"{lhs} IN ({', '.join(['%s'] * len(values))})", [*params, *values]) if values \
                else ("1 = 0", list(params))

        statements: dict[str, list] = {}

        def timed(execute, sql, params, many, context):
            t = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                key = ("before " if bulk.AnyOf.as_sql is before_sql else "after  ") + sql[:60]
                row = statements.setdefault(key, [0, 0.0])
                row[0] += 1
                row[1] += time.perf_counter() - t

        apply = store.apply_result

        def measured(*args, **kwargs):
            c0 = time.process_time()
            with connection.execute_wrapper(timed):
                try:
                    return apply(*args, **kwargs)
                finally:
                    print(f"  apply CPU {time.process_time() - c0:.3f} s", flush=True)

        store.apply_result = measured
        for i in range(reps):
            if i:
                _db.reset_pending(loaded["pending_ids"])
            bulk.AnyOf.as_sql = before_sql if i % 2 == 0 else now_sql
            print("run", i + 1, "IN lists (before)" if i % 2 == 0 else "ANY arrays (after)", flush=True)
            r = _db.timed_cycle()
            print("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()),
                  flush=True)
        bulk.AnyOf.as_sql = now_sql
        for key, (n, t) in sorted(statements.items(), key=lambda kv: -kv[1][1])[:24]:
            print(f"{t:7.3f} s {n:3d}  {key}")
        for variant in ("before", "after "):
            print(variant, "statements", round(sum(t for k, (n, t) in statements.items() if k.startswith(variant)), 3),
                  "s")


if __name__ == "__main__":
    sys.exit(main())
