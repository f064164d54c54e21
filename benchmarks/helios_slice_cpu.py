"""Process CPU of one replay of the Helios slice without the profiler (issue 16): the replay that
`benchmarks/profile_replay.py ROOT helios 2` profiles and `benchmarks/peers/helios_vs_ours.py --full` runs as
"ours partitioned" (Philly from day 30 for 2 days, the 11 VCs at 0.25 scale as hard partitions, durations capped
at 24 h, cycle_interval 1 s, no fairness meter).

    python benchmarks/helios_slice_cpu.py ROOT [ROOT2 ...]    # each checkout in its own process, in the order given

ROOT: a checkout (its `scheduler`, `clusterspec`, tests/sim/test_replay_digest.py's helios_slice). Prints per
checkout the replay's process CPU (time.process_time around `replay` alone) and the report's cycles, mean
and p99 queueing delay (the helios_vs_ours report line: 14,800 cycles, 9230.686056458511 s, 152600.8 s).
Give before and after alternately (A B A B) to compare on a shared box.
"""
import importlib.util
import subprocess
import sys
import time


def one(root: str) -> None:
    sys.path[:0] = [root, root + "/platform"]
    from scheduler.core import CycleConfig
    from scheduler.sim.replay import replay
    spec = importlib.util.spec_from_file_location("slices", root + "/tests/sim/test_replay_digest.py")
    slices = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(slices)
    cluster, trace = slices.helios_slice(2.0, borrow=False, start=30.0, max_hours=24.0)
    c0 = time.process_time()
    rep = replay(cluster, trace, config=CycleConfig(), cycle_interval=1.0, fairness=False)
    print(f"{root} cpu {time.process_time() - c0:.2f} s, cycles {rep.cycles}, mean queue {rep.queueing.get('mean')} s, "
          f"p99 {rep.queueing.get('p99')} s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(sys.argv[2])
    else:
        for root in sys.argv[1:]:
            subprocess.run([sys.executable, __file__, "--one", root], check=True)
