"""Run-time estimates from history: how long will this job run?

The estimator is the history-based one of Helios (Hu et al., SC '21, "Characterization and Prediction of
Deep Learning Workloads in Large-Scale GPU Datacenters", section 5): a job's run time is predicted from
the run times of the same user's recent jobs of the same shape, because in their traces (and in Philly's)
a user resubmits the same job many times and the run time of a user's last similar jobs predicts the
next one far better than any global model. We keep its structure and make it robust:

- levels, most specific first: (user, shape) -> queue -> cluster. A level answers once it holds at least
  `min_samples` finished jobs; else the next one does; with no history at all, `default_seconds`.
  The shape is the job's GPU count (tasks x GPUs per task), what the cluster sees of a job.
- each level keeps the `window` most recent run times (a bounded deque: old behaviour ages out).
- the point estimate is the MEDIAN of the window and the spread its 90th percentile (P90): DL run times
  are heavy-tailed (many jobs fail in minutes, a few run for days), so a mean is pulled far off by the
  tail; the median is what a typical job of that level does, and the P90 is what the forecast's
  pessimistic pass uses (forecast.forecast_start: "90 %: ...").
- conditional on elapsed time: a running job that has run `elapsed` seconds is estimated from the
  samples longer than `elapsed` (the median of what jobs that lasted this long went on to do); when none
  is that long, elapsed x `overrun_factor` (it has outlived its history: expect it to run on a while), and
  its P90 from the same heavy tail: a Pareto tail (survival ~ x^-a) whose median given survival to `elapsed`
  is elapsed x overrun_factor has 2^(1/a) = overrun_factor, so its P90 is elapsed x 10^(1/a) =
  elapsed x overrun_factor^log2(10) (x 3.84 for the default 1.5). Before, the P90 equalled the median there,
  so the "90 %" start of a job queued behind such a job was its median start (new-user trial 23, F3).

Pure: no I/O. Units: seconds.
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Hashable, Iterable


@dataclass(frozen=True, slots=True)
class Estimate:
    """A run time estimate. median and p90 in seconds (p90 >= median); source names the level that
    answered ("time_limit", "user_shape", "queue", "cluster", "default"); samples = its history size."""

    median: float
    p90: float
    source: str
    samples: int = 0


_LOG2_10 = math.log2(10.0)  # P90 / median exponent of a Pareto tail (RuntimeEstimator's outlived case)


def _quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, by nearest rank (a value that occurred)."""
    n = len(sorted_values)
    return sorted_values[min(n - 1, max(0, int(q * n + 0.5) - 1 if q < 1 else n - 1))]


class RuntimeEstimator:
    """History of finished jobs' run times and the estimate for a new or running job.

    observe(user, queue, gpus, seconds): record one finished job (seconds > 0; others are ignored).
    estimate(user, queue, gpus, elapsed=0.0, time_limit=None) -> Estimate.
    window: run times kept per level (most recent); min_samples: history a level needs to answer."""

    LEVELS = ("user_shape", "queue", "cluster")

    def __init__(self, *, window: int = 50, min_samples: int = 3, default_seconds: float = 3600.0,
                 overrun_factor: float = 1.5):
        if window < 1 or min_samples < 1 or default_seconds <= 0 or overrun_factor < 1:
            raise ValueError("window, min_samples >= 1, default_seconds > 0, overrun_factor >= 1")
        self.window, self.min_samples = window, min_samples
        self.default_seconds, self.overrun_factor = default_seconds, overrun_factor
        self._hist: dict[tuple, deque] = {}
        self._sorted: dict[tuple, list[float] | None] = {}

    def _keys(self, user: Hashable, queue: str, gpus: int) -> tuple[tuple, tuple, tuple]:
        return ("user_shape", user, int(gpus)), ("queue", queue), ("cluster",)

    def observe(self, user: Hashable, queue: str, gpus: int, seconds: float) -> None:
        if not seconds or seconds <= 0:
            return
        for key in self._keys(user, queue, gpus):
            hist = self._hist.get(key)
            if hist is None:
                hist = self._hist[key] = deque(maxlen=self.window)
            hist.append(float(seconds))
            self._sorted[key] = None

    def observe_many(self, rows: Iterable[tuple[Hashable, str, int, float]]) -> None:
        """Record (user, queue, gpus, seconds) rows, oldest first."""
        for user, queue, gpus, seconds in rows:
            self.observe(user, queue, gpus, seconds)

    def _samples(self, key: tuple) -> list[float]:
        cached = self._sorted.get(key)
        if cached is None:
            cached = self._sorted[key] = sorted(self._hist.get(key, ()))
        return cached

    def estimate(self, user: Hashable, queue: str, gpus: int, *, elapsed: float = 0.0,
                 time_limit: float | None = None) -> Estimate:
        """Expected TOTAL run time (seconds from start) of a job of `user` in `queue` asking `gpus` GPUs
        that has run `elapsed` seconds so far. A declared `time_limit` (seconds) answers alone: the job is
        stopped there, and the issue's rule is "the time limit when given"."""
        elapsed = max(0.0, float(elapsed or 0.0))
        if time_limit is not None and time_limit > 0:
            t = max(float(time_limit), elapsed)
            return Estimate(t, t, "time_limit", 0)
        for key in self._keys(user, queue, gpus):
            samples = self._samples(key)
            if len(samples) < self.min_samples:
                continue
            longer = samples[bisect.bisect_right(samples, elapsed):]
            if not longer:  # outlived its history: the Pareto tail of the module docstring
                t = max(elapsed * self.overrun_factor, elapsed + 60.0)
                p90 = max(elapsed * self.overrun_factor ** _LOG2_10, t)
                return Estimate(t, p90, key[0], len(samples))
            return Estimate(_quantile(longer, 0.5), _quantile(longer, 0.9), key[0], len(samples))
        t = max(self.default_seconds, elapsed * self.overrun_factor)
        return Estimate(t, t, "default", 0)
