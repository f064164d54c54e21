"""Bytes per poll of the pages' live JSON endpoints, changed vs unchanged (issue 13: under 20 KB per poll
when nothing changed), and after one more cycle, whole vs with `?since=<cursor>` (frontend/delta.py).

Builds a demo-sized world in a temporary SQLite database: the Philly-like size mix on 1,008 GPUs (14 racks
of 18 x 4 GPUs), 16 team queues, one scheduling cycle, then a history of 600 cluster samples and 600
samples per queue (what hours of the demo leave). As a platform admin it GETs each endpoint the pages poll
(/cluster/metrics.json every 3 s, /queues/data.json, /fragmentation/data.json, /queueing/data.json every
5 s, /topology.json), then GETs it again with the ETag it got in If-None-Match, as poll.js does. Reported:
status and body bytes of both, and the headers' size of the 304.

    python benchmarks/poll_bytes.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta

import _common

ENDPOINTS = ["/cluster/metrics.json", "/queues/data.json", "/fragmentation/data.json", "/queueing/data.json",
             "/topology.json"]
TARGET_BYTES = 20 * 1024


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller world and history (CI)")
    args = ap.parse_args(argv)
    tmp = tempfile.NamedTemporaryFile(prefix="poll-bench-", suffix=".sqlite3", delete=False)
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp.name}"
    os.environ["REDIS_URL"] = ""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    import _db
    from gpuplatform.models import ClusterSample, Queue, QueueSample
    from gpuplatform.scheduling.store import run_cycle_once

    settings.ALLOWED_HOSTS = ["*"]
    history = 100 if args.quick else 600
    try:
        call_command("migrate", verbosity=0)
        world = _common.scale_world(racks=4 if args.quick else 14, pending=300 if args.quick else 1500,
                                    running=200 if args.quick else 800, queues=16)
        _db.load_world(world)
        run_cycle_once(clock=_db.EPOCH)
        leaves = list(Queue.objects.filter(team__isnull=False))
        samples, cluster = [], []
        for i in range(history):
            t = _db.EPOCH - timedelta(seconds=60 * (history - i))
            cluster.append(ClusterSample(time=t, schedulable_gpus=1000, allocated_gpus=600 + i % 50, free_gpus=400,
                                         allocation_rate=0.6, fragmentation_rate=0.1, domain_completeness=0.5,
                                         largest_runnable={"1": 4, "2": 72, "3": 288}, pending_jobs=100,
                                         running_jobs=200))
            samples += [QueueSample(time=t, queue=q, used=(i + k) % 40, guarantee=4, quota=30, limit=60,
                                    pending_demand=(i * k) % 17, fair_share=25.5) for k, q in enumerate(leaves)]
        ClusterSample.objects.bulk_create(cluster, batch_size=1000)
        QueueSample.objects.bulk_create(samples, batch_size=2000)
        admin = get_user_model().objects.create_user("bench-admin", is_staff=True, is_superuser=True)
        client = Client()
        client.force_login(admin)
        from gpuplatform.models import Gpu

        out = {"gpus": Gpu.objects.count(),
               "team_queues": len(leaves), "history_points": history, "endpoints": {},
               "target_bytes_unchanged": TARGET_BYTES, "machine": _common.machine()}
        for url in ENDPOINTS:
            t = time.perf_counter()
            first = client.get(url)
            first_ms = 1000 * (time.perf_counter() - t)
            tag = first["ETag"]
            again = client.get(url, HTTP_IF_NONE_MATCH=tag)
            header_bytes = sum(len(k) + len(v) + 4 for k, v in again.items()) + len("HTTP/1.1 304 Not Modified\r\n")
            out["endpoints"][url] = {
                "full_status": first.status_code, "full_body_bytes": len(first.content), "full_ms": round(first_ms, 1),
                "unchanged_status": again.status_code, "unchanged_body_bytes": len(again.content),
                "unchanged_header_bytes": header_bytes,
                "unchanged_under_target": len(again.content) + header_bytes < TARGET_BYTES,
                "cursor": first.json().get("cursor")}
        # One more cycle's samples (what changes between two polls of the running demo), then each endpoint
        # again: whole (what a page got before `since`) and with ?since=<the cursor of the first answer>.
        t_next = _db.EPOCH + timedelta(seconds=60)
        ClusterSample.objects.create(time=t_next, schedulable_gpus=1000, allocated_gpus=640, free_gpus=360,
                                     allocation_rate=0.64, fragmentation_rate=0.12, domain_completeness=0.5,
                                     largest_runnable={"1": 4, "2": 72, "3": 288}, pending_jobs=99, running_jobs=201)
        QueueSample.objects.bulk_create([QueueSample(time=t_next, queue=q, used=k % 40, guarantee=4, quota=30, limit=60,
                                                     pending_demand=k % 17, fair_share=25.5)
                                         for k, q in enumerate(leaves)])
        for url in ENDPOINTS:
            v = out["endpoints"][url]
            whole = client.get(url)
            v["changed_whole_body_bytes"] = len(whole.content)
            if v["cursor"]:
                delta = client.get(url, {"since": v["cursor"]})
                assert delta.status_code == 200, delta.content[:300]
                v["changed_since_body_bytes"] = len(delta.content)
                v["changed_since_under_target"] = len(delta.content) < TARGET_BYTES
            else:  # no time series (the topology map): `since` changes nothing, the payload is sent whole
                v["changed_since_body_bytes"] = None
        _common.save("poll_bytes", out)
        return out
    finally:
        from django.db import connections

        connections.close_all()
        os.unlink(tmp.name)


if __name__ == "__main__":
    result = main(sys.argv[1:])
    print(f"{result['team_queues']} team queues, {result['history_points']} samples of history")
    for url, v in result["endpoints"].items():
        print(f"  {url:26s} changed: {v['full_status']} {v['full_body_bytes'] / 1024:8.1f} KiB ({v['full_ms']:.0f} ms)"
              f"   unchanged: {v['unchanged_status']} body {v['unchanged_body_bytes']} B + headers "
              f"{v['unchanged_header_bytes']} B")
        since = v["changed_since_body_bytes"]
        print(f"  {'':26s} one cycle later: whole {v['changed_whole_body_bytes'] / 1024:8.1f} KiB, with ?since= "
              + (f"{since / 1024:.1f} KiB" if since is not None else "n/a (no time series)"))
