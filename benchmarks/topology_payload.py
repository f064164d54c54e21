"""Topology map payload at 20,160 GPUs (280 NVL72-style racks of 18 nodes x 4 GPUs, 35 leaves, one spine).

Builds the cluster in a temporary SQLite database (or --db-url), loads running and pending jobs with the
Philly size mix (_common.scale_world, _db.load_world), runs one scheduling cycle to place more, then times
the /topology.json view (flat queries + frontend.topology.topology_payload + JSON encoding) as a platform
admin, median of N, for the whole cluster (per-domain aggregate), one leaf (576 GPUs, per GPU) and one
rack (72 GPUs), and measures the JSON size. Target (issue #4): under 300 ms and under 2 MB.

    python benchmarks/topology_payload.py [--quick] [--repeat N] [--db-url sqlite:////tmp/topo.sqlite3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import _common


def results_name(quick: bool) -> str:
    """The results file's name: a quick run (`make bench`) writes topology_payload_quick.json (ignored by git), so
    it never overwrites the committed full-run figures (new-user trial 10, F19)."""
    return "topology_payload_quick" if quick else "topology_payload"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and jobs (CI)")
    ap.add_argument("--tiny", action="store_true", help="a smoke test: a small world, one request per view, no file")
    ap.add_argument("--repeat", type=int, default=None, help="timed requests per view (default 15, quick 5)")
    ap.add_argument("--db-url", default=None, help="database URL (default: a temporary SQLite file)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.tiny else 5 if args.quick else 15)
    tmp = None
    if not args.db_url:
        tmp = tempfile.NamedTemporaryFile(prefix="topology-bench-", suffix=".sqlite3", delete=False)
    os.environ["REDIS_URL"] = ""
    import _db

    _db.use_database(args.db_url or f"sqlite:///{tmp.name}")  # also after another benchmark in this process
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import RequestFactory

    from frontend import views_dashboards
    from gpuplatform.models import Allocation, Gpu, Job
    from gpuplatform.scheduling.store import run_cycle_once

    try:
        call_command("migrate", verbosity=0)
        t0 = time.perf_counter()
        world = _common.scale_world(pending=200 if args.tiny else 2000 if args.quick else 8000,
                                    running=150 if args.tiny else 1500 if args.quick else 5000)
        _db.load_world(world)
        cycle = run_cycle_once(clock=_db.EPOCH)
        setup_s = time.perf_counter() - t0
        admin = get_user_model().objects.create_user("bench-admin", is_staff=True, is_superuser=True)
        factory = RequestFactory()

        def request(query: str) -> tuple[float, int, dict]:
            req = factory.get("/topology.json" + query)
            req.user = admin
            t = time.perf_counter()
            resp = views_dashboards.topology_json(req)
            body = resp.content
            return time.perf_counter() - t, len(body), resp

        out = {"gpus": Gpu.objects.count(), "live_allocations": Allocation.objects.filter(released_at__isnull=True).count(),
               "running_jobs": Job.objects.filter(state="running").count(),
               "pending_jobs": Job.objects.filter(state="pending").count(),
               "cycle_binds": cycle.binds if cycle else None, "setup_s": round(setup_s, 1), "repeat": repeat,
               "database": "sqlite (temporary file)" if tmp else args.db_url.split("://")[0], "views": {},
               "machine": _common.machine()}
        for label, query in (("cluster (per-domain cells)", ""), ("one leaf, 576 GPUs (per GPU)", "?zoom=leaf3"),
                             ("one rack, 72 GPUs (per GPU)", "?zoom=nvl17"),
                             ("cluster, team filter", "?team=team2")):
            request(query)  # warm-up
            times, size = [], 0
            for _ in range(repeat):
                s, size, _resp = request(query)
                times.append(s)
            out["views"][label] = {"query": query or "(none)", "median_ms": round(1000 * statistics.median(times), 1),
                                   "max_ms": round(1000 * max(times), 1), "json_bytes": size}
        if not args.tiny:
            _common.save(results_name(args.quick), out)
        return out
    finally:
        if tmp is not None:
            from django.db import connections

            connections.close_all()
            os.unlink(tmp.name)


if __name__ == "__main__":
    result = main(sys.argv[1:])
    print(f"{result['gpus']} GPUs, {result['live_allocations']} allocated, {result['running_jobs']} running, "
          f"{result['pending_jobs']} pending jobs ({result['database']}; set-up {result['setup_s']} s)")
    for label, v in result["views"].items():
        print(f"  {label:32s} median {v['median_ms']:7.1f} ms  max {v['max_ms']:7.1f} ms  JSON {v['json_bytes'] / 1024:8.1f} KiB")
