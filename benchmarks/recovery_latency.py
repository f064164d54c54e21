"""Fault-to-requeue latency and recovery time with real node agents on this machine (docs/diagnosis.md).

    python benchmarks/recovery_latency.py [--reps 30] [--db auto|postgres|sqlite]

Same harness as benchmarks/execution_latency.py (its Bench: the web server in a thread, the scheduling loop
in another at 1 s between cycles, real `manage.py gpu_agent` processes on loopback, a scratch database).
Two agents x 4 GPUs, agent poll 0.2 s. Two kinds of fault, each repeated --reps times:

1. A task fails (reported): a gang of 2 tasks x 4 GPUs (one per node) with max_restarts = reps; in every
   attempt rank 1 writes time.time() to a file and exits 1 about 1 s after it started; rank 0 sleeps.
   fault-to-requeue = the `restarted` Event's time (the server's clock, this machine's) - the time rank 1
   wrote just before exiting. It covers: the exit seen by the agent's supervisor, the agent's next report,
   the server applying it (diagnosis included) and the requeue in the same request.
2. A fatal GPU fault (XID 79) in a heartbeat: a 1-task job runs on one GPU; this process POSTs a heartbeat
   carrying xids [79] for that GPU to /api/v1/nodes/<node>/heartbeat/ as the agent would;
   fault-to-requeue = `requeued_after_failure` Event time - the time just before the POST.

Also recorded for 1: the recovery time of each interruption (Attempt.recovery_seconds: fault -> every task
of the next attempt running), which adds the requeue backoff (REQUEUE_BACKOFF_SECONDS = 0.5 here), the next
cycle (1 s loop) and the agents' poll. Figures: benchmarks/results/recovery_latency.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common as C
import execution_latency as EL

FAILER = r"""
import os, sys, time
rank, attempt = int(os.environ["RANK"]), int(os.environ["GPUPLATFORM_ATTEMPT"])
if rank == 1 and attempt < int(os.environ["FAIL_UNTIL"]):
    time.sleep(1.0)
    with open(os.path.join(os.environ["FAULT_DIR"], f"fault-{attempt}"), "w") as fh:
        fh.write(repr(time.time()))
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
    sys.exit(1)
time.sleep(3600)
"""


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(pct(values, 0.5), 4), "p90": round(pct(values, 0.9), 4),
            "p99": round(pct(values, 0.99), 4), "max": round(max(values), 4), "min": round(min(values), 4)}


def until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out: {what() if callable(what) else what}")


def task_failures(bench, reps: int, tmp: Path) -> dict:
    from gpuplatform import services
    from gpuplatform.models import Attempt, Event, Job

    faults = tmp / "faults"
    faults.mkdir()
    job = services.submit_job(team=bench.team, queue=bench.queue, name="failer", command=[sys.executable, "-c", FAILER],
                              roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 4}], max_restarts=reps,
                              env={"FAULT_DIR": str(faults), "FAIL_UNTIL": str(reps)})
    until(lambda: Job.objects.filter(pk=job.pk, attempts=reps, state="running").exists(), 60 + reps * 15,
          f"{reps} restarts and the last attempt running")
    latencies = []
    for ev in Event.objects.filter(job=job, kind="restarted").order_by("time"):
        attempt = ev.data["attempts"] - 1
        wrote = float((faults / f"fault-{attempt}").read_text())
        latencies.append(ev.time.timestamp() - wrote)
    rec = list(Attempt.objects.filter(job=job, recovery_seconds__isnull=False).values_list("recovery_seconds", flat=True))
    cats = sorted(set(Attempt.objects.filter(job=job).values_list("category", flat=True)))
    services.cancel_job(Job.objects.get(pk=job.pk))
    until(lambda: Job.objects.filter(pk=job.pk, state="cancelled").exists(), 30, "the failer cancelled")
    return {"fault_to_requeue_s": summary(latencies), "recovery_s": summary(rec), "categories": cats,
            "raw_fault_to_requeue_s": [round(x, 4) for x in latencies], "raw_recovery_s": rec}


def gpu_faults(bench, reps: int) -> dict:
    from gpuplatform import services
    from gpuplatform.agent.client import post_json
    from gpuplatform.models import Allocation, Event, Gpu, Job, Node

    latencies = []
    for i in range(reps):
        job = services.submit_job(team=bench.team, queue=bench.queue, name=f"victim-{i}", command=["sleep", "3600"],
                                  roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
        until(lambda: Job.objects.filter(pk=job.pk, state="running").exists(), 60,
              lambda: f"the victim to run: {Job.objects.filter(pk=job.pk).values_list('state', 'pending_reason').get()}; "
                      f"nodes {list(Node.objects.values_list('name', 'state', 'health_reason'))}; live allocations "
                      f"{list(Allocation.objects.filter(released_at__isnull=True).values_list('job__name', 'job__state'))}; "
                      f"unhealthy {list(Gpu.objects.exclude(health='healthy').values_list('node__name', 'index'))}")
        node, index = Allocation.objects.filter(job=job, released_at__isnull=True).values_list(
            "gpu__node__name", "gpu__index").get()
        t = time.time()
        post_json(f"{bench.api}/api/v1/nodes/{node}/heartbeat/", bench.token,
                  {"gpus": [{"index": index, "health": "healthy", "xids": [79]}]})
        ev = until(lambda: Event.objects.filter(job=job, kind="requeued_after_failure").first(), 30, "the requeue")
        latencies.append(ev.time.timestamp() - t)
        print(f"  GPU fault {i}: {latencies[-1]:.3f} s", flush=True)
        services.cancel_job(Job.objects.get(pk=job.pk))
        until(lambda: Job.objects.filter(pk=job.pk, state="cancelled").exists(), 30, "the victim cancelled")
        # the GPU comes back with the agent's next heartbeat (its inventory says healthy)
        until(lambda: not Allocation.objects.filter(job=job, released_at__isnull=True).exists(), 30, "GPUs free")
        post_json(f"{bench.api}/api/v1/nodes/{node}/heartbeat/", bench.token,
                  {"gpus": [{"index": index, "health": "healthy"}]})
        services.uncordon_node(Node.objects.get(name=node), reason="benchmark: next repetition")  # (xid-node-reset)
    return {"fault_to_requeue_s": summary(latencies), "raw_fault_to_requeue_s": [round(x, 4) for x in latencies]}


def run(args, argv) -> dict:
    report: dict = {"machine": C.machine(), "command": "python benchmarks/recovery_latency.py " + " ".join(argv),
                    "loadavg_start": os.getloadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="gpuplatform-recovery-bench-"))
    EL.SCRATCH_PG = "gpuplatform_recovery_bench"  # its own scratch database (not execution_latency's)
    vendor, url = EL.choose_database(args.db, tmp)
    os.environ["DATABASE_URL"] = url
    os.environ["REDIS_URL"] = ""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    import django

    django.setup()
    EL.quiet_logs()
    from django.conf import settings

    settings.REQUEUE_BACKOFF_SECONDS, settings.REQUEUE_BACKOFF_CAP_SECONDS = 0.5, 0.5
    settings.HEALTH_RULE_REPEAT_SECONDS = 0
    settings.AGENT_POLL_SECONDS = 0.2
    report["database"] = vendor
    args.grace = 3
    bench = EL.Bench(args, tmp)
    t0 = time.monotonic()
    try:
        bench.setup()
        bench.start_server()
        bench.start_loop()
        bench.start_agents(2, 4, "rec", poll=0.2)
        bench.set_poll(0.2)
        report["task_failure"] = task_failures(bench, args.reps, tmp)
        print("task failure:", json.dumps(report["task_failure"]["fault_to_requeue_s"]),
              "recovery:", json.dumps(report["task_failure"]["recovery_s"]), flush=True)
        report["gpu_fault"] = gpu_faults(bench, args.reps)
        print("GPU fault (XID 79 heartbeat):", json.dumps(report["gpu_fault"]["fault_to_requeue_s"]), flush=True)
    finally:
        report["teardown"] = bench.teardown()
        from django.db import connections

        connections.close_all()
        EL.drop_database(vendor, url)
        shutil.rmtree(tmp, ignore_errors=True)
    report["wall_seconds"] = round(time.monotonic() - t0, 1)
    report["loadavg_end"] = os.getloadavg()
    return report


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30, help="faults of each kind")
    ap.add_argument("--db", choices=["auto", "postgres", "sqlite"], default="auto")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    report = run(args, argv)
    path = C.save("recovery_latency", report)
    print(f"figures written to {path.relative_to(C.ROOT)}", flush=True)
    return report


if __name__ == "__main__":
    main()
