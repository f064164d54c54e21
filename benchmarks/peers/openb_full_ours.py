"""Ours alone on the FGD comparison's full input (all 1,213 openb GPU nodes, 9,364 pods to 130 %), both
sharing configs, one engine cycle per BATCH arrivals (the full pod-by-pod run did not fit a session's CPU share):

    .venv/bin/python benchmarks/peers/openb_full_ours.py 25      # after fgd_vs_ours.py --full built the input

Prints per config: CPU and wall seconds, failed pods, and per arrived mark (arrived, requested, occupied,
largest runnable whole-GPU job on one node, failed multi-GPU pods). Input: $PEERS_WORK/fgd-input/frac1-stop1.3.
"""
import os
import sys, time, json
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "platform"), os.path.join(ROOT, "benchmarks")]
from clusterspec.importers.openb import load_openb_cluster, load_openb_trace
from scheduler.core import CycleConfig, run_cycle
import openb_fgd
inp = os.path.join(os.environ.get("PEERS_WORK") or os.path.join(__import__("tempfile").gettempdir(), "peers-work"), "fgd-input", "frac1-stop1.3")
cluster = load_openb_cluster(inp + "/nodes.csv", path_pod_csv=inp + "/pods.csv")
trace = load_openb_trace(inp + "/pods.csv")
batch = int(sys.argv[1])
for name, cfg in (("ours_fgd_whole", CycleConfig(fgd_whole=True)), ("ours_full", CycleConfig())):
    t0, c0 = time.perf_counter(), time.process_time()
    r = openb_fgd.run(cluster, trace, run_cycle, cfg, batch, 1.3)
    print(name, "batch", batch, "cpu", round(time.process_time() - c0, 1), "wall", round(time.perf_counter() - t0, 1),
          "failed", r["failed"], "pods", r["pods"],
          [(c["arrived"], round(c["requested"], 4), round(c["occupied"], 4), c["largest_whole"], c["failed_multi_gpu"]) for c in r["curve"]],
          flush=True)
