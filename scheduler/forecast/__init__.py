"""Forecast and what-if (DESIGN section 13): the engine run forward from a snapshot in simulated time.

- `estimator.RuntimeEstimator`: run times from history (Helios' history-based estimator: user and shape,
  then queue, then cluster; median and P90).
- `forecast.forecast` / `forecast_start`: estimated start (and P90) of every pending job.
- `whatif.what_if`: the same forecast before and after a list of changes (quota, nodes, priority, cancel,
  a hypothetical submission), per job and per queue; nothing is written anywhere.
- `accuracy`: forecasts made during a trace replay compared with the starts that replay then made.
Pure: no Django, no I/O.
"""
from .estimator import Estimate, RuntimeEstimator
from .forecast import Forecast, JobForecast, forecast, forecast_start

__all__ = ["Estimate", "Forecast", "JobForecast", "RuntimeEstimator", "forecast", "forecast_start"]
