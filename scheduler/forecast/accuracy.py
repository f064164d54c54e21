"""How good is the forecast? Forecast during a trace replay, then compare with what that replay did.

    measure(cluster, trace, *, every=7200, time_limit_factor=None, ...) -> dict

A `ForecastingReplay` is the replay simulator (scheduler.sim.replay.Replay) that, every `every` simulated
seconds, before running its cycle, forecasts every pending job's start from the cycle's own snapshot
(scheduler.forecast.forecast_start: the same engine run forward, knowing nothing of later arrivals) and
records, per (job, forecast time): the forecast start and its P90, and the backfill reservation's estimate
of that same cycle (CycleResult.estimated_start: the baseline "what the scheduler already says", which
covers only the job(s) holding the reservation). When the replay later starts the job, the actual start
is known and each prediction gets its error.

Run times: with `time_limit_factor` = x every job declares x times its trace duration and the forecast
uses the limit (the issue's rule); with None, the history estimator (estimator.RuntimeEstimator) learns
from the jobs this replay completes. Philly traces carry no user, so its finest level is (queue, shape).

Figures (`summarize`), over predictions whose job started before the replay ended, later than the cycle
the forecast was made in (a job that cycle starts is trivially predicted and left out):
  error = forecast start - actual start (s; > 0 = the forecast was late); wait = actual start - forecast time;
  median and p90 of |error|; share with |error| <= 15 min; share with |error| <= 25 % of the actual wait
  (the remaining wait from the forecast time); share of actual starts before the P90 (coverage); and the
  same for the baselines: "no estimate" (what the pages showed before: nothing; counted as a miss
  everywhere, its coverage 0) and "backfill reservation" (only the jobs it covers; the rest count as
  misses, and its own figures over the jobs it covers are given too).
Pure: no I/O.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from clusterspec.spec import ClusterSpec, Trace
from scheduler.core.snapshot import CycleResult
from scheduler.sim.replay import Replay

from .estimator import RuntimeEstimator
from .forecast import forecast_start

FIFTEEN_MIN = 900.0


@dataclass(slots=True)
class Prediction:
    job: str
    at: float  # forecast time (simulated s)
    start: float | None  # forecast start
    p90: float | None
    backfill: float | None  # the reservation's estimate in the same cycle, if it covered this job
    actual: float | None = None


class ForecastingReplay(Replay):
    """Replay (same arguments) + a forecast every `every` seconds; `predictions` after run()."""

    def __init__(self, cluster: ClusterSpec, trace: Trace, *, every: float = 7200.0, horizon: float = 7 * 86400.0,
                 estimator: RuntimeEstimator | None = None, forecast_kwargs: dict | None = None, **kwargs):
        super().__init__(cluster, trace, **kwargs)
        self.every, self.horizon = every, horizon
        self.estimator = estimator or RuntimeEstimator()
        self.forecast_kwargs = forecast_kwargs or {}
        self.next_sample = self.start
        self.predictions: list[Prediction] = []
        self.first_start: dict[str, list[float]] = {}
        self.forecasts = 0
        self.forecast_wall = 0.0
        self.forecast_cycles = 0

    def _estimate(self, job, elapsed):
        e = self.estimator.estimate(job.queue, job.queue, job.gpus_requested, elapsed=elapsed,
                                    time_limit=job.time_limit)
        return e.median, e.p90

    def settled(self, now: float) -> bool:
        """Replay.settled, except where a forecast is due (`cycle` samples then, with the engine's estimates)."""
        return not (now >= self.next_sample and self.state.pending) and super().settled(now)

    def cycle(self, now: float) -> CycleResult:
        sampled = None
        if now >= self.next_sample and self.state.pending:
            self.next_sample = now + self.every
            snap = self.state.snapshot(now)
            t0 = time.perf_counter()
            starts, info = forecast_start(snap, self._estimate, horizon=self.horizon, step=self.cycle_interval,
                                          **self.forecast_kwargs)
            self.forecast_wall += time.perf_counter() - t0
            self.forecast_cycles += info["cycles"] + info["cycles_p90"]
            self.forecasts += 1
            sampled = [(j.id, starts.get(j.id)) for j in snap.jobs if j.state == "pending" and not j.attempts]
        result = super().cycle(now)
        if sampled is not None:
            for job_id, f in sampled:
                self.predictions.append(Prediction(job_id, now, f.start if f else None, f.start_p90 if f else None,
                                                   result.estimated_start.get(job_id)))
        return result

    def _start(self, binding, now: float) -> None:
        super()._start(binding, now)
        if binding.job_id in self.state.running:
            self.first_start.setdefault(binding.job_id, []).append(now)

    def complete(self, when: float, job_id: str) -> None:
        info = self.state.running.get(job_id)
        if info is not None and info.start_time is not None and not info.attempts:
            self.estimator.observe(info.queue, info.queue, info.gpus_requested, when - info.start_time)
        super().complete(when, job_id)

    def resolve(self) -> list[Prediction]:
        """Fill each prediction's actual start (the job's first start after the forecast time)."""
        for p in self.predictions:
            p.actual = next((s for s in self.first_start.get(p.job, ()) if s >= p.at), None)
        return self.predictions


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def _figures(pairs: list[tuple[float | None, float, float, float | None]]) -> dict:
    """pairs: (estimate or None, actual start, forecast time, p90 or None) -> the error figures. A missing
    estimate counts as a miss (never within 15 min or 25 %), and is left out of the error percentiles."""
    n = len(pairs)
    errs = [abs(e - a) for e, a, _, _ in pairs if e is not None]
    within15 = sum(1 for e, a, _, _ in pairs if e is not None and abs(e - a) <= FIFTEEN_MIN)
    within25 = sum(1 for e, a, t, _ in pairs if e is not None and abs(e - a) <= 0.25 * (a - t))
    covered = sum(1 for _, a, _, p in pairs if p is not None and a <= p + 1e-6)
    late = [e - a for e, a, _, _ in pairs if e is not None]
    return {"predictions": n, "with_estimate": len(errs),
            "median_abs_error_s": _pct(errs, 0.5), "p90_abs_error_s": _pct(errs, 0.9),
            "median_signed_error_s": _pct(late, 0.5),
            "share_within_15min": within15 / n if n else None,
            "share_within_25pct_of_wait": within25 / n if n else None,
            "share_started_by_p90": covered / n if n else None}


def summarize(predictions: list[Prediction]) -> dict:
    """The figures for the forecast and both baselines over the resolved predictions (module docstring)."""
    # a job the same cycle starts is trivially predicted: only jobs still waiting after it count
    done = [p for p in predictions if p.actual is not None and p.actual > p.at]
    forecast = _figures([(p.start, p.actual, p.at, p.p90) for p in done])
    none = _figures([(None, p.actual, p.at, None) for p in done])
    backfill = _figures([(p.backfill, p.actual, p.at, p.backfill) for p in done])
    covered = [p for p in done if p.backfill is not None]
    waits = [p.actual - p.at for p in done]
    return {"resolved": len(done), "unresolved": len(predictions) - len(done),
            "median_wait_s": _pct(waits, 0.5), "p90_wait_s": _pct(waits, 0.9),
            "forecast": forecast, "no_estimate": none, "backfill_reservation": backfill,
            "backfill_reservation_covered_only": _figures([(p.backfill, p.actual, p.at, p.backfill) for p in covered]),
            "forecast_on_backfill_covered": _figures([(p.start, p.actual, p.at, p.p90) for p in covered])}


def measure(cluster: ClusterSpec, trace: Trace, *, every: float = 7200.0, time_limit_factor: float | None = None,
            horizon: float = 7 * 86400.0, cycle_interval: float = 60.0, keep: int = 2000, **kwargs) -> dict:
    """Replay with forecasts every `every` s; returns summarize()'s figures plus the run's cost, and up to
    `keep` (forecast start - actual start, actual wait) pairs for a plot (evenly thinned)."""
    rep = ForecastingReplay(cluster, trace, every=every, horizon=horizon, time_limit_factor=time_limit_factor,
                            cycle_interval=cycle_interval, fairness=False, **kwargs)
    t0 = time.perf_counter()
    report = rep.run()
    preds = rep.resolve()
    out = summarize(preds)
    done = [p for p in preds if p.actual is not None and p.start is not None and p.actual > p.at]
    stride = max(1, len(done) // keep) if keep else 0
    out["points"] = [[round((p.actual - p.at) / 3600, 3), round((p.start - p.at) / 3600, 3)]
                     for p in done[::stride]] if stride else []
    out.update({"time_limit_factor": time_limit_factor, "every_s": every, "horizon_s": horizon,
                "forecasts": rep.forecasts, "forecast_cycles": rep.forecast_cycles,
                "forecast_wall_s": round(rep.forecast_wall, 2), "wall_s": round(time.perf_counter() - t0, 2),
                "jobs": len(trace.jobs), "jobs_started": report.jobs_started})
    return out
