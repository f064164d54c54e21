"""The openb GPU-sharing trace, FGD-paper style (issue #7 item 7): GPU allocation ratio vs arrived load.

    python benchmarks/openb_fgd.py [--quick] [--batch N]

Methodology of the FGD paper (Weng et al., ATC '23): pods arrive and are never deleted; each is
scheduled on arrival or fails (it is not retried); arrivals continue until the arrived GPU requests
reach 130 % of the cluster's GPU capacity; the GPU allocation ratio is recorded against the arrived
load. Here: the openb default pod list (load_trace("openb"), 7,064 GPU pods, CPU-only pods skipped) on
its 1,213-node / 6,212-GPU cluster (load_cluster("openb")), pods in trace order; the trace holds only
~92 % of the capacity in (fractional) requests, so it is replayed again from its start (new pod ids)
until 130 % have arrived. One engine cycle per `batch` arrivals (default 25; quick 400, full policy only); pods a cycle
could not place are dropped as failed. Policies: the full policy (run_cycle, CycleConfig()) and, for
reference, the kube-like spread (core.baselines.run_cycle_kube).

x = arrived GPU requests / capacity, counting a fractional pod as its gpu_milli / 1000;
y = allocated GPUs / capacity, two ways: `requested` = the placed pods' own requests (fractional pods
at their share: the FGD paper's measure) and `occupied` = GPUs held whole or holding a fraction. The
importer keeps fractional requests as fractions (3,078 pods in the default trace; issue 14): the full
policy packs them by scheduler/core/sharing.py's FGD score on GPUs in mode "auto". The kube-like
reference does not share GPUs (it gives a fractional pod a whole GPU, as before). In full mode the
policy `full_fgd_whole` (CycleConfig(fgd_whole=True)) places one-task whole-GPU pods by the FGD score too.
Every cycle's snapshot carries the trace's request mix as the FGD score's expected workload (Snapshot.workload,
sharing.workload_of), as the FGD simulator takes its typical pods from the pod list it replays.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import _common as C
from functools import partial

from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.baselines import run_cycle_kube
from scheduler.core.sharing import workload_of
from scheduler.sim.state import ClusterState, job_info, queue_infos

MARKS = [round(0.1 * i, 1) for i in range(1, 14)]  # 10 % .. 130 %
KUBE = CycleConfig(binpack=False, topology=False, fair_share=False, backfill=False, preemption=False, reclaim=False)


def requested(job) -> float:
    return job.tasks * job.gpus_per_task if job.gpu_milli >= 1000 else job.tasks * job.gpu_milli / 1000.0


def run(cluster, trace, engine, config, batch: int, stop: float = 1.3, workload: bool = True) -> dict:
    """workload: give the FGD score the trace's request mix as its expected workload (Snapshot.workload), as the
    FGD simulator takes its target workload from the pod list it replays; off = the mix of the snapshot's jobs."""
    state = ClusterState(cluster, queue_infos(cluster))
    mix = workload_of(job_info(j) for j in trace.jobs) if workload else ()
    cap = state.capacity
    jobs = list(trace.jobs)
    by_id: dict = {}
    arrived = placed_req = 0.0
    marks = list(MARKS[: int(round(stop * 10))])
    curve, failed, cycles, engine_s = [], 0, 0, 0.0
    failed_multi = [0]  # failed pods asking for more than one GPU (the "gangs" of openb: multi-GPU pods)
    i = batch_n = 0
    t_wall = time.perf_counter()

    def cycle() -> None:
        nonlocal placed_req, failed, cycles, engine_s
        t0 = time.perf_counter()
        snap = state.snapshot(0.0)
        result = engine(replace(snap, workload=mix) if mix else snap, config)
        engine_s += time.perf_counter() - t0
        cycles += 1
        for b in result.bindings:
            if state.bind(b, 0.0, gang=getattr(engine, "gang", True)) is not None:
                placed_req += requested(by_id[b.job_id])
        for job_id in list(state.pending):  # FGD: a pod that does not fit on arrival fails
            state.drop(job_id)
            failed += 1
            if by_id[job_id].gpus_per_task > 1:
                failed_multi[0] += 1

    while marks:
        job = jobs[i % len(jobs)]
        if i >= len(jobs):
            job = replace(job, id=f"{job.id}-r{i // len(jobs)}")
        i += 1
        by_id[job.id] = job
        state.submit(job_info(job))
        arrived += requested(job)
        batch_n += 1
        crossing = arrived / cap >= marks[0] - 1e-9
        if batch_n >= batch or crossing:
            cycle()
            batch_n = 0
        while marks and arrived / cap >= marks[0] - 1e-9:
            curve.append({"arrived": marks[0], "arrived_exact": arrived / cap, "requested": placed_req / cap,
                          "occupied": (state.used_gpus + len(state.shares)) / cap, "pods": i, "failed": failed,
                          "failed_multi_gpu": failed_multi[0], "largest_whole": state.largest_whole_block()})
            marks.pop(0)
    return {"curve": curve, "pods": i, "failed": failed, "cycles": cycles, "engine_seconds": engine_s,
            "wall_seconds": time.perf_counter() - t_wall, "capacity": cap}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--batch", type=int, default=None, help="arrivals per engine cycle")
    ap.add_argument("--no-kube", action="store_true", help="skip the kube-like reference run")
    args = ap.parse_args(argv)
    from clusterspec.importers import load_cluster, load_trace

    batch = args.batch or (200 if args.tiny else 400 if args.quick else 25)
    cluster = load_cluster("openb")
    trace = load_trace("openb")
    stop = 0.3 if args.tiny else 1.3
    policies = [("full", partial(run_cycle, cache=EngineCache()), CycleConfig())]  # its own engine cache
    if not args.tiny and not args.quick:  # whole-GPU pods by the FGD score too (scheduler/core/sharing.py)
        policies.append(("full_fgd_whole", partial(run_cycle, cache=EngineCache()), CycleConfig(fgd_whole=True)))
    if not args.no_kube and not args.tiny and not args.quick:
        policies.append(("kube_like", run_cycle_kube, KUBE))
    results = {}
    for name, engine, config in policies:
        results[name] = run(cluster, trace, engine, config, batch, stop)
        r = results[name]
        print(f"{name}: {r['pods']} pods arrived, {r['failed']} failed, {r['cycles']} cycles, engine "
              f"{r['engine_seconds']:.1f} s, wall {r['wall_seconds']:.1f} s", flush=True)
    lines = ["| arrived | " + " | ".join(f"{n} requested / occupied" for n in results) + " |",
             "| --- |" + " --- |" * len(results)]
    for k in range(len(results["full"]["curve"])):
        row = [f"{results['full']['curve'][k]['arrived']:.0%}"]
        for n in results:
            c = results[n]["curve"][k]
            row.append(f"{c['requested']:.1%} / {c['occupied']:.1%}")
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines)
    print(table)
    out = {"machine": C.machine(), "mode": "tiny" if args.tiny else "quick" if args.quick else "full",
           "command": "python benchmarks/openb_fgd.py " + " ".join(argv or sys.argv[1:]), "batch": batch,
           "cluster": {"nodes": len(cluster.nodes), "gpus": cluster.gpus}, "trace_pods": len(trace.jobs),
           "trace_stats": trace.stats, "results": results, "table": table}
    if not args.tiny:
        C.save(f"openb_fgd_{out['mode']}", out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
