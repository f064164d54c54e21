"""benchmarks/federation.py is part of `make bench` (benchmarks/run.py ORDER) and its summary line reads
its figures: a small run (60 jobs) through run.summary_line."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))


def test_federation_benchmark_is_in_make_bench_and_summarised():
    run = importlib.import_module("run")
    assert "federation" in run.ORDER
    r = importlib.import_module("federation").main(["--quick", "--jobs", "60"])
    assert r["jobs"] == 60 and r["policies"]["dispatcher"]["copies_per_job"] == 1.0
    assert r["policies"]["first-to-admit"]["copies_per_job"] > 1.0
    line = run.summary_line("federation", r)
    assert line.startswith("60 jobs on 256/128/64 GPUs: dispatcher vs first-to-admit copies/job 1.00 vs ")
    assert "decisions/s" in line and "(50)" in line
