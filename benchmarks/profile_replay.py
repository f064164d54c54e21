"""cProfile of one replay (issue 16): where a replay's CPU goes, top 30 by own time then 40 by cumulative.

    python benchmarks/profile_replay.py . helios [DAYS]       # the Helios slice (tests/sim/test_replay_digest.helios_slice)
                                                              # from day 30, partitioned; 24 h cap when DAYS >= 2
    python benchmarks/profile_replay.py . philly START END    # the shipped Philly cluster and trace, days START-END

The first argument is the checkout to profile (its `scheduler` and `clusterspec`). Prints the unprofiled-
equivalent process CPU (of the profiled run: inflated by the profiler), cycles and the mean queueing delay.
"""
import cProfile
import importlib.util
import pstats
import sys
import time

root, which = sys.argv[1], sys.argv[2]
sys.path[:0] = [root, root + "/platform"]
from clusterspec.importers import load_cluster, load_trace  # noqa: E402
from scheduler.sim.replay import replay  # noqa: E402

if which == "helios":
    spec = importlib.util.spec_from_file_location("sl", root + "/tests/sim/test_replay_digest.py")
    sl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sl)
    from scheduler.core import CycleConfig
    days = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    cluster, trace = sl.helios_slice(days, borrow=False, start=30.0, **({"max_hours": 24.0} if days >= 2 else {}))
    kw = dict(config=CycleConfig(), cycle_interval=1.0, fairness=False)
else:
    s, e = float(sys.argv[3]), float(sys.argv[4])
    cluster, trace = load_cluster("philly"), load_trace("philly", start_days=s, until_days=e)
    kw = {}
pr = cProfile.Profile()
c0 = time.process_time()
pr.enable()
rep = replay(cluster, trace, **kw)
pr.disable()
print("cpu", time.process_time() - c0, "cycles", rep.cycles, "mean queue", rep.queueing.get("mean"))
st = pstats.Stats(pr)
st.sort_stats("tottime").print_stats(30)
st.sort_stats("cumulative").print_stats(40)
