"""The cycle's snapshot read and apply on PostgreSQL, old and new code side by side in one process (issue 16,
branch apply16b): a world loaded once into a throw-away database (BENCH_DB names it), then
`store.run_cycle_once` REPS times per variant, alternating, the starts undone between runs (_db.reset_pending).
Per run: the split (snapshot, engine, apply), the apply's process CPU, its statements' summed wall time and
the commit's; then medians per variant.

    BENCH_DB=<db> WORLD=bind REPS=3 VARIANTS=old,new python benchmarks/apply16b_ab.py

WORLD=bind: bind_throughput's world (20,000 pending one-GPU jobs, 20,160 GPUs); WORLD=headline: cycle_scale's
(10,000 pending, 5,000 running). A variant is a set of monkeypatches (VARIANTS below) applied for its runs only:
`old` puts back main's apply as it was before this branch (COPY through write_row, update_rows' lists adapted by
psycopg (copied here), no overlap, every foreign-key check at the commit), `old_copy` / `old_update` /
`old_overlap` / `old_checks` one of those parts only, `new` is
the code as it is.
PROFILE=1: one `new` cycle under cProfile (top functions of the apply printed), STATEMENTS=1: the statements'
summed time per statement kind.

Wall times on a shared machine are noisy: compare within one run, alternating.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import _db


def _old_update_rows(model, rows, columns, constants, where=None):
    """gpuplatform.bulk.update_rows' PostgreSQL path as on main before this branch: psycopg adapts each
    column as a Python list."""
    from django.db import connection

    from gpuplatform.bulk import _field

    if not rows:
        return 0
    where = where or {}
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [_field(meta, c) for c in columns]
    types = ["bigint"] + [f.db_type(connection).split("(")[0] for f in fields]
    const_fields = [(_field(meta, k), v) for k, v in constants.items()]
    where_fields = [(_field(meta, k), v) for k, v in where.items()]
    sets = [f"{quote(f.column)} = v.c{i}" for i, f in enumerate(fields)]
    sets += [f"{quote(f.column)} = %s" for f, _ in const_fields]
    conditions = "".join(f" AND t.{quote(f.column)} = %s" for f, _ in where_fields)
    arrays = ", ".join(f"%s::{t}[]" for t in types)
    names = ", ".join(["id"] + [f"c{i}" for i in range(len(fields))])
    params = ([f.get_db_prep_save(v, connection) for f, v in const_fields] + [list(col) for col in zip(*rows)]
              + [f.get_db_prep_save(v, connection) for f, v in where_fields])
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {quote(meta.db_table)} AS t SET {', '.join(sets)} FROM unnest({arrays}) AS v({names}) "
                    f"WHERE t.id = v.id{conditions}", params)
        return cur.rowcount


def _patches(name):
    """[(module, attribute, value)] for a variant."""
    from gpuplatform import bulk
    from gpuplatform.scheduling import store

    def unformatted(model, columns, rows, vendor="postgresql"):  # COPY through write_row, as before
        return bulk.CopyRows(model, columns, list(rows), None)

    def sequential(work, db_work, parallel):
        db_work()
        return work()

    old = {"copy": (bulk, "copy_rows", unformatted), "update": (bulk, "update_rows", _old_update_rows),
           "overlap": (store, "_overlapped", sequential), "checks": (store, "_run_deferred_checks", lambda: None)}
    if name == "new":
        return []
    if name == "old":
        return list(old.values())
    if name.startswith("old_"):  # old_copy, old_update, old_overlap: that one part as before
        return [old[name[4:]]]
    raise SystemExit(f"unknown variant {name}")


def _apply_patches(patches):
    """Patch the attribute where it is defined and wherever it was imported by name (store, evict)."""
    from gpuplatform.scheduling import evict, store

    undo = []
    for mod, attr, value in patches:
        original = getattr(mod, attr)
        for m in (mod, store, evict):
            if getattr(m, attr, None) is original:
                undo.append((m, attr, original))
                setattr(m, attr, value)
    return undo


def _trace(state) -> None:
    """TRACE=1: wall time per step of the cycle (wrappers around the functions named below)."""
    from gpuplatform import bulk
    from gpuplatform.scheduling import evict, release, samples, store, usage_decay

    def wrap(mod, attr, label):
        fn = getattr(mod, attr, None)
        if fn is None:  # gone since (e2e10: store.check_references, store._run_deferred_checks, store.rows)
            return

        def timed(*a, **k):
            t, c = time.perf_counter(), state["backend_cpu"]()
            try:
                return fn(*a, **k)
            finally:
                tr = state.setdefault("trace", {})
                w, sc = tr.get(label, (0.0, 0.0))
                tr[label] = (w + time.perf_counter() - t, sc + state["backend_cpu"]() - c)
        setattr(mod, attr, timed)

    import scheduler.core

    for mod, attr in [(store, "_run_deferred_checks"), (scheduler.core, "run_cycle"), (store, "apply_result"),
                      (release, "release_expired"), (store, "build_snapshot"), (store, "rows_many"), (bulk, "insert_rows"), (store, "check_references"), (store, "update_rows"), (store, "record_events"),
                      (store, "_bind_all"), (store, "_excluded_node_events"), (evict, "apply_evictions"),
                      (evict, "apply_holds"), (store, "_update_pending"), (samples, "write_samples"),
                      (store, "close_idle_queues"), (store, "reserve_cycle"), (usage_decay, "record")]:
        wrap(mod, attr, f"{mod.__name__.rsplit('.', 1)[-1]}.{attr}")


def main() -> None:
    reps = int(os.environ.get("REPS", "3"))
    names = os.environ.get("VARIANTS", "old,new").split(",")
    world = _db.ab_world(os.environ.get("WORLD", "bind"))
    with _db.bench_database("bench_apply16b_ab"):
        loaded = _db.load_world(world)
        import logging

        from django.db import connection

        from gpuplatform.scheduling import store

        logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
        state = {"statements": 0.0, "commit": 0.0, "cpu": 0.0, "by": {}}

        def timed(execute, sql, params, many, context):
            t, c = time.perf_counter(), backend_cpu()
            try:
                return execute(sql, params, many, context)
            finally:
                dt = time.perf_counter() - t
                state["statements"] += dt
                key = sql[:70]
                w, sc = state["by"].get(key, (0.0, 0.0))
                state["by"][key] = (w + dt, sc + backend_cpu() - c)

        apply = store.apply_result

        backend_cpu = _db.backend_cpu
        state["backend_cpu"] = backend_cpu

        def measured(*args, **kwargs):
            state.update(statements=0.0, commit=0.0, by={})
            s0 = backend_cpu()
            c0 = time.process_time()
            try:
                with _db.timed_commits(state), connection.execute_wrapper(timed):
                    return apply(*args, **kwargs)
            finally:
                state["cpu"] = time.process_time() - c0
                state["server"] = backend_cpu() - s0

        store.apply_result = measured
        snapshot = store.build_snapshot

        def measured_snapshot(*args, **kwargs):  # SNAPSHOT=1: the snapshot read's statements, client and server CPU
            if not os.environ.get("SNAPSHOT"):
                return snapshot(*args, **kwargs)
            state["by"] = {}
            s0, c0, w0 = backend_cpu(), time.process_time(), time.perf_counter()
            prof = None
            if os.environ.get("SNAPSHOT") == "profile":
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            with connection.execute_wrapper(timed):
                out = snapshot(*args, **kwargs)
            if prof is not None:
                import pstats

                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(18)
            print(f"  snapshot wall {time.perf_counter() - w0:.3f}, client CPU {time.process_time() - c0:.3f}, "
                  f"server CPU {backend_cpu() - s0:.2f}")
            for k, v in sorted(state["by"].items(), key=lambda kv: -kv[1][0])[:12]:
                print(f"    wall {v[0]:.3f} server CPU {v[1]:.2f} {k}")
            return out

        store.build_snapshot = measured_snapshot
        results: dict[str, list] = {n: [] for n in names}
        first = True
        if os.environ.get("PROFILE"):
            import cProfile
            import pstats

            prof = cProfile.Profile()
            store_apply = measured

            def profiled(*a, **k):
                prof.enable()
                try:
                    return store_apply(*a, **k)
                finally:
                    prof.disable()

            store.apply_result = profiled
            r = _db.timed_cycle()
            print(r)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            for k, v in sorted(state["by"].items(), key=lambda kv: -kv[1][0])[:15]:
                print(f"  wall {v[0]:.3f} server CPU {v[1]:.2f} {k}")
            print(f"  commit {state['commit']:.3f}")
            return
        if os.environ.get("TRACE"):
            _trace(state)
        for rep in range(reps):
            for name in names:
                if not first:
                    _db.reset_pending(loaded["pending_ids"])
                first = False
                undo = _apply_patches(_patches(name))
                try:
                    r = _db.timed_cycle()
                finally:
                    for m, attr, value in reversed(undo):
                        setattr(m, attr, value)
                row = {"total": r["total"], "snapshot": r["snapshot"], "engine": r["engine"], "apply": r["apply"],
                       "cpu": state["cpu"], "server": state["server"], "statements": state["statements"], "commit": state["commit"]}
                results[name].append(row)
                print(f"rep {rep + 1} {name:10s} load {os.getloadavg()[0]:.1f}: total {r['total']:.3f} = snapshot "
                      f"{r['snapshot']:.3f} + engine {r['engine']:.3f} + apply {r['apply']:.3f} (apply CPU "
                      f"{state['cpu']:.3f}, server CPU {state['server']:.2f}, statements {state['statements']:.3f}, commit {state['commit']:.3f}), "
                      f"binds {r['binds']}", flush=True)
                if os.environ.get("TRACE"):
                    print("    " + ", ".join(f"{k} {v[0]:.3f} (server {v[1]:.2f})" for k, v in state.pop("trace").items()))
                if os.environ.get("STATEMENTS"):
                    for k, v in sorted(state["by"].items(), key=lambda kv: -kv[1][0])[:10]:
                        print(f"    wall {v[0]:.3f} server CPU {v[1]:.2f} {k}")
        print("medians:")
        for name, rows in results.items():
            print(f"  {name:10s} " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.3f}" for k in rows[0]))


if __name__ == "__main__":
    sys.exit(main())
