"""Telemetry cost (issue #20): bytes on the wire per node per minute, rows and bytes stored per node per
day, the /metrics scrape time at 1,000 nodes x 8 GPUs, and the time of one retention pass.

    python benchmarks/telemetry_cost.py [--nodes 1000] [--minutes 30]

Wire: the real agent code (agent/telemetry.py NvmlSampler on the fake NVML of tests/agent, 8 GPUs with
busy-looking values), one sample every TELEMETRY_SECONDS (10), one telemetry call per heartbeat (30 s), the
body as the agent sends it (json.dumps, UTF-8; HTTP headers not counted). Store: a throw-away PostgreSQL
database (benchmarks/_db.py) with `nodes` x 8 GPUs, half of the nodes running one 8-GPU job each, and
`minutes` of raw samples for every GPU (COPY, as ingestion does); bytes per row = the table's total
relation size (heap + indexes) / rows. Scrape: what /metrics answers (prometheus_client's generate_latest over
the platform's registry + the DCGM exposition), median of 5. Retention: one downsample() pass that folds all
those raw rows into 1-minute rows (raw window set to 0). Writes benchmarks/results/telemetry_cost.json.
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import _db
import _common as C

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def wire(minutes: int = 10) -> dict:
    from gpuplatform.agent.telemetry import NvmlSampler, TelemetryBuffer
    from tests.agent.fake_nvml import FakeNVML

    base = FakeNVML()
    dump = copy.deepcopy(base.dump)
    dump["gpus"] = [dict(dump["gpus"][0], index=i, uuid=f"GPU-{i}") for i in range(8)]
    nvml = FakeNVML(dump)
    rng = random.Random(1)
    t = [1_764_556_800.0]
    sampler = NvmlSampler(nvml, clock=lambda: t[0])
    buf = TelemetryBuffer(10.0)
    sent, calls = 0, 0
    for step in range(minutes * 6):
        for g in range(8):
            nvml.set(g, sm=rng.randint(60, 100), memory_used_bytes=rng.randint(40_000, 140_000) * 2**20,
                     power_usage_mw=rng.randint(300_000, 700_000), temperature_c=rng.randint(40, 80),
                     throttle_reasons=rng.choice((0, 0, 0, 4)))
        buf.add(*sampler.sample())
        t[0] += 10.0
        if step % 3 == 2:  # a heartbeat every 30 s carries the buffer
            body = buf.batch()
            sent += len(json.dumps(body).encode())
            calls += 1
            buf.ack(body)
    return {"bytes_per_node_per_minute": sent / minutes, "calls_per_minute": calls / minutes,
            "rows_per_call": 8 * 3, "sample_seconds": 10, "heartbeat_seconds": 30, "gpus": 8}


def store(nodes: int, minutes: int, profile: bool = False) -> dict:
    with _db.bench_database("bench_telemetry"):
        from django.conf import settings
        from django.db import connection
        from prometheus_client import generate_latest

        from gpuplatform import bulk, clock
        from gpuplatform.models import Allocation, Gpu, GpuSample, Job, JobRole, Node, Queue, Task, Team
        from gpuplatform.prometheus import REGISTRY
        from gpuplatform.telemetry import downsample
        from gpuplatform.telemetry.exporter import exposition
        from gpuplatform.telemetry.ingest import COLUMNS

        now = _db.EPOCH + timedelta(days=1)
        clock.use(lambda: now)
        Node.objects.bulk_create([Node(name=f"node-{i:04d}", flavor="H100", gpu_count=8,
                                       labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}) for i in range(nodes)])
        node_ids = list(Node.objects.order_by("name").values_list("id", flat=True))
        Gpu.objects.bulk_create([Gpu(node_id=n, index=i, uuid=f"GPU-{n}-{i}") for n in node_ids for i in range(8)])
        team = Team.objects.create(name="t", slug="t")
        queue = Queue.objects.create(name="q", team=team)
        gpus_by_node: dict[int, list[int]] = {}
        for gid, nid in Gpu.objects.values_list("id", "node_id"):
            gpus_by_node.setdefault(nid, []).append(gid)
        holder = {}
        for k, nid in enumerate(node_ids[: nodes // 2]):
            job = Job.objects.create(team=team, queue=queue, name=f"job-{k}", state=Job.State.RUNNING,
                                     submitted_at=now - timedelta(hours=1), started_at=now - timedelta(hours=1))
            role = JobRole.objects.create(job=job, tasks=1, gpus_per_task=8, min_available=1)
            task = Task.objects.create(job=job, role=role, index=0, node_id=nid, state=Task.State.RUNNING)
            Allocation.objects.bulk_create([Allocation(task=task, gpu_id=g, job=job, created_at=now - timedelta(hours=1))
                                            for g in gpus_by_node[nid]])
            for g in gpus_by_node[nid]:
                holder[g] = (job.pk, task.pk)
        rng = random.Random(2)
        t0 = time.perf_counter()
        rows_total = 0
        all_gpus = [g for n in node_ids for g in gpus_by_node[n]]
        for s in range(minutes * 6):
            at = now - timedelta(minutes=minutes) + timedelta(seconds=10 * s)
            rows = [(g, 0, at, 10.0, 1, float(rng.randint(0, 100)), float(rng.randint(1000, 80000)), 1000.0,
                     float(rng.randint(100, 700)), 55.0, 0, 0, None, *holder.get(g, (None, None))) for g in all_gpus]
            bulk.insert_rows(GpuSample, COLUMNS, rows)
            rows_total += len(rows)
        load_s = time.perf_counter() - t0
        with connection.cursor() as cur:
            cur.execute("ANALYZE gpuplatform_gpusample")
            cur.execute("SELECT pg_total_relation_size('gpuplatform_gpusample'), pg_relation_size('gpuplatform_gpusample')")
            total_bytes, heap_bytes = cur.fetchone()
        times = []
        text = b""
        for _ in range(5):
            t1 = time.perf_counter()
            text = generate_latest(REGISTRY) + exposition().encode()  # what /metrics answers
            times.append(time.perf_counter() - t1)
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            generate_latest(REGISTRY) + exposition().encode()
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        dcgm_lines = sum(1 for line in text.decode().splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
        settings.TELEMETRY_RAW_HOURS = 0
        t2 = time.perf_counter()
        kept = downsample(now + timedelta(minutes=1))
        retention_s = time.perf_counter() - t2
        clock.use(None)
        return {"nodes": nodes, "gpus": nodes * 8, "raw_rows": rows_total, "load_seconds": load_s,
                "bytes_per_row_total": total_bytes / rows_total, "bytes_per_row_heap": heap_bytes / rows_total,
                "scrape_seconds_median": statistics.median(times), "scrape_seconds": times,
                "scrape_bytes": len(text), "dcgm_gpu_util_series": dcgm_lines,
                "retention_pass_seconds": retention_s, "retention": kept}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--profile", action="store_true", help="print a profile of one scrape")
    args = ap.parse_args(argv)
    out = {"machine": C.machine(), "wire": wire()}
    print("wire:", out["wire"], flush=True)
    out["store"] = store(args.nodes, args.minutes, args.profile)
    s = out["store"]
    gpus = 8
    per_day = {"raw_inserted": gpus * 86400 // 10, "raw_kept_6h": gpus * 6 * 360, "minute_kept_7d": gpus * 7 * 1440,
               "quarter_kept_90d": gpus * 90 * 96}
    per_day["stored_steady_state"] = per_day["raw_kept_6h"] + per_day["minute_kept_7d"] + per_day["quarter_kept_90d"]
    out["rows_per_node"] = per_day
    out["bytes_per_node_steady_state"] = per_day["stored_steady_state"] * s["bytes_per_row_total"]
    C.save("telemetry_cost", out)
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
