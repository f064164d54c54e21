"""`?since=`: a poll that sends only the new points of the time-series charts (issue 13).

Every polled JSON payload carries `cursor`: the time of the newest point of its time-series figures (ISO
8601, or null). A page polls `<url>?since=<cursor>`; the answer then holds, for each time-series figure
(every trace's `x` a sorted list of ISO times), only its new points:

    {"extend": {"x": [[...], ...], "y": [[...], ...]}, "names": [trace names], "points": N}

one list per trace, in the figure's trace order; `points` is the full figure's window (the client keeps at
most that many: Plotly.extendTraces' maxPoints). A figure that is not a time series (bars, box plots, an
empty state) is sent whole as before. When the names differ from the drawn figure's (a queue appeared, a
series was added) the page asks again without `since` and redraws. Numbers and HTML fragments are small
and always sent whole. ETag / 304 (conditional.py) still applies: with nothing new the URL and the body
repeat, so the poll costs a 304. Measured by benchmarks/poll_bytes.py.
"""
from __future__ import annotations

from bisect import bisect_right
from datetime import datetime


class BadSince(ValueError):
    pass


def parse_since(value: str | None) -> datetime | None:
    """The `since` query value as an aware datetime (None when absent). Raises BadSince (the message names
    the rule) for anything that is not an ISO 8601 time with a UTC offset."""
    if value in (None, ""):
        return None
    try:
        t = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BadSince("since must be an ISO 8601 time with an offset, e.g. 2026-12-01T10:00:00+00:00 "
                       "(the `cursor` of the previous answer)") from None
    if t.tzinfo is None:
        raise BadSince("since must carry a UTC offset, e.g. 2026-12-01T10:00:00+00:00")
    return t


def _times(trace: dict) -> list[datetime] | None:
    x = trace.get("x")
    if not isinstance(x, list) or not all(isinstance(v, str) for v in x):
        return None
    try:
        times = [datetime.fromisoformat(v) for v in x]
    except ValueError:
        return None
    if any(t.tzinfo is None for t in times) or any(a > b for a, b in zip(times, times[1:])):
        return None
    return times


def _series(figure: dict) -> list[list[datetime]] | None:
    """Each trace's times, or None when the figure is not a time series."""
    if not isinstance(figure, dict) or figure.get("empty") or not figure.get("data"):
        return None
    out = []
    for trace in figure["data"]:
        times = _times(trace)
        if times is None or not isinstance(trace.get("y"), list) or len(trace["y"]) != len(times):
            return None
        out.append(times)
    return out


def cursor(figures: dict) -> str | None:
    """The newest time over every time-series figure's traces (ISO), or None."""
    newest = None
    for figure in figures.values():
        series = _series(figure)
        for times in series or ():
            if times and (newest is None or times[-1] > newest):
                newest = times[-1]
    return newest.isoformat() if newest else None


def since_figures(figures: dict, since: datetime) -> dict:
    """`figures` with each time-series figure replaced by its points after `since` (the module docstring's
    shape); the others unchanged."""
    out = {}
    for key, figure in figures.items():
        series = _series(figure)
        if series is None:
            out[key] = figure
            continue
        xs, ys = [], []
        for trace, times in zip(figure["data"], series):
            start = bisect_right(times, since)
            xs.append(trace["x"][start:])
            ys.append(trace["y"][start:])
        out[key] = {"extend": {"x": xs, "y": ys}, "names": [t.get("name") for t in figure["data"]],
                    "points": max((len(t) for t in series), default=0)}
    return out


def with_since(request, payload: dict) -> dict:
    """The payload with `cursor` set and, when the request has `since`, its figures cut to the new points
    (and `since` echoed). Raises BadSince for a malformed `since`."""
    since = parse_since(request.GET.get("since"))
    figures = payload.get("figures") or {}
    payload["cursor"] = cursor(figures)
    if since is not None:
        payload["figures"] = since_figures(figures, since)
        payload["since"] = since.isoformat()
    return payload
