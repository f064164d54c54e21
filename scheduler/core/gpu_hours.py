"""The GPU-hour ledger (DESIGN section 14): where every GPU-second of schedulable capacity went. Pure: no
I/O, no Django; the live platform (gpuplatform.utilization), the replay (scheduler.sim.replay) and the
benchmarks build spans from their own history and call `compute`.

Buckets (BUCKETS, in this order), each GPU-second in exactly one:

- ``down``: capacity of a node or GPU that is unhealthy / failed / in repair;
- ``useful``: allocated to a running task whose work was kept (the job succeeded, is still running, or the
  work before its last checkpoint);
- ``idle_allocated``: allocated and running, but the GPUs sat under the idle threshold (telemetry only);
- ``lost_to_failure``: work since the last checkpoint of an attempt that failed or was preempted without
  saving, plus the time a failed job held GPUs before the failure was detected;
- ``grace_and_startup``: from binding to the first progress (start), stop grace periods, checkpoint stalls;
- ``held``: reserved for a gang (bound GPUs whose gang has not started) or a reservation;
- ``free_fragmented``: free while some pending job waited (it did not fit, else it would have started);
- ``free``: free while nothing waited.

Input: `Span(start, end, gpus, bucket, labels)`, times in seconds (any epoch), gpus a count (may be a
fraction for shared GPUs). Three kinds:

- capacity spans (bucket ``capacity``): the GPUs that exist, labels ``flavor`` and ``node``;
- use spans (buckets ``down``, ``useful``, ``idle_allocated``, ``lost_to_failure``, ``grace_and_startup``,
  ``held``), labels among ``flavor``, ``queue``, ``team``, ``job``, ``node``;
- waiting spans (bucket ``waiting``): a pending job waited in [start, end); label ``flavor`` ("" = any
  flavor), gpus ignored.

Scopes. ``cluster`` and ``flavor``: capacity is the capacity spans'; free GPU-seconds are what remains after
down and use, split into fragmented / free by the waiting spans. ``queue``, ``team`` and ``job``: the scope owns
no GPUs, so its capacity is the GPU-seconds its own use spans cover (free, fragmented and down are 0 there).

Invariant (tested on random histories): for every scope value and every time bin, the buckets sum to its
capacity exactly, whatever the input: when the use spans of an instant exceed the capacity (an inconsistent
history), they are clipped in BUCKETS order (down first), never the capacity.

effective_utilization = useful / (capacity - down); None when capacity - down is 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

BUCKETS = ("down", "useful", "idle_allocated", "lost_to_failure", "grace_and_startup", "held", "free_fragmented",
           "free")
USE_BUCKETS = BUCKETS[:6]
SCOPES = ("cluster", "flavor", "queue", "team", "job")
OWNED_SCOPES = ("cluster", "flavor")  # scopes that own capacity (the others' capacity is their use)


@dataclass(frozen=True)
class Span:
    """`gpus` GPUs in `bucket` from `start` to `end` (seconds); `labels`: scope name -> value."""

    start: float
    end: float
    gpus: float
    bucket: str
    labels: tuple = ()  # ((name, value), ...) sorted; use Span.of(...) to build from a dict

    @staticmethod
    def of(start: float, end: float, gpus: float, bucket: str, **labels) -> "Span":
        return Span(float(start), float(end), float(gpus), bucket,
                    tuple(sorted((k, str(v)) for k, v in labels.items() if v is not None)))

    def label(self, name: str) -> str | None:
        for k, v in self.labels:
            if k == name:
                return v
        return None


@dataclass
class Totals:
    """GPU-seconds per bucket of one scope value, and the capacity they sum to."""

    capacity: float = 0.0
    buckets: dict = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))

    @property
    def effective_utilization(self) -> float | None:
        usable = self.capacity - self.buckets["down"]
        return self.buckets["useful"] / usable if usable > 1e-9 else None

    def hours(self) -> dict:
        """{"capacity", each bucket, in GPU-hours; "effective_utilization" (0..1 or None)}."""
        out = {"capacity": self.capacity / 3600.0}
        out.update({b: v / 3600.0 for b, v in self.buckets.items()})
        out["effective_utilization"] = self.effective_utilization
        return out


@dataclass
class LedgerResult:
    """`totals`: scope value -> Totals over the window; `series`: scope value -> list of (bin start, Totals)
    (only when a step was given); `since`, `until`: the window (seconds)."""

    since: float
    until: float
    totals: dict
    series: dict


def _scope_value(span: Span, scope: str) -> str | None:
    if scope == "cluster":
        return "cluster"
    return span.label(scope)


def _clip_instant(capacity: float, use: dict, waiting: bool, owned: bool) -> dict:
    """GPUs per bucket at one instant, summing to `capacity` (see the module docstring)."""
    out = dict.fromkeys(BUCKETS, 0.0)
    left = capacity
    for b in USE_BUCKETS:
        v = min(max(use.get(b, 0.0), 0.0), left)
        out[b] = v
        left -= v
    if owned and left > 0:
        out["free_fragmented" if waiting else "free"] = left
    return out


def compute(capacity: list[Span], use: list[Span], waiting: list[Span], *, since: float, until: float,
            scope: str = "cluster", step: float | None = None, only: set | None = None) -> LedgerResult:
    """The ledger of [since, until) per value of `scope` (one of SCOPES). `step` (seconds): also a series
    of bins of that width (the last one may be shorter). `only`: keep just these scope values.

    Returns LedgerResult. Raises ValueError for an unknown scope or bucket, until < since, step <= 0."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if until < since:
        raise ValueError(f"until ({until}) is before since ({since})")
    if step is not None and not step > 0:
        raise ValueError(f"step must be > 0 seconds, got {step}")
    owned = scope in OWNED_SCOPES
    # per scope value: list of (time, kind, bucket, delta)
    changes: dict[str, list] = {}

    def add(key, s: Span, kind: str):
        a, b = max(s.start, since), min(s.end, until)
        if b <= a or key is None or (only is not None and key not in only):
            return
        lst = changes.setdefault(key, [])
        amount = 1.0 if kind == "wait" else s.gpus
        lst.append((a, kind, s.bucket, amount))
        lst.append((b, kind, s.bucket, -amount))

    for s in use:
        if s.bucket not in USE_BUCKETS:
            raise ValueError(f"use span bucket must be one of {', '.join(USE_BUCKETS)}, got {s.bucket!r}")
        key = _scope_value(s, scope)
        add(key, s, "use")
        if not owned:
            add(key, Span(s.start, s.end, s.gpus, "capacity", s.labels), "cap")
    if owned:
        for s in capacity:
            add(_scope_value(s, scope), s, "cap")
        for s in waiting:
            flavor = s.label("flavor") or ""
            if scope == "cluster":
                add("cluster", s, "wait")
            else:
                for key in list(changes):
                    if not flavor or flavor == key:
                        add(key, s, "wait")
    totals, series = {}, {}
    for key, lst in changes.items():
        lst.sort(key=lambda c: c[0])
        tot = Totals()
        bins = []
        if step is not None:
            n = max(1, math.ceil((until - since) / step))
            bins = [Totals() for _ in range(n)]
        cap, waiting_n, use_now = 0.0, 0, dict.fromkeys(USE_BUCKETS, 0.0)
        t_prev = since
        i = 0
        while i <= len(lst):
            t = lst[i][0] if i < len(lst) else until
            if t > t_prev and cap > 1e-12:
                inst = _clip_instant(cap, use_now, waiting_n > 0, owned)
                _accumulate(tot, cap, inst, t - t_prev)
                if bins:
                    _accumulate_bins(bins, since, step, t_prev, t, cap, inst)
            t_prev = max(t_prev, t)
            if i == len(lst):
                break
            while i < len(lst) and lst[i][0] == t:
                _, kind, bucket, delta = lst[i]
                if kind == "cap":
                    cap += delta
                elif kind == "wait":
                    waiting_n += 1 if delta > 0 else -1
                else:
                    use_now[bucket] += delta
                i += 1
            if abs(cap) < 1e-9:
                cap = 0.0
        totals[key] = tot
        if step is not None:
            series[key] = [(since + k * step, b) for k, b in enumerate(bins)]
    return LedgerResult(since, until, totals, series)


def _accumulate(tot: Totals, cap: float, inst: dict, dt: float) -> None:
    tot.capacity += cap * dt
    for b, v in inst.items():
        tot.buckets[b] += v * dt


def _accumulate_bins(bins, since, step, a, b, cap, inst) -> None:
    k = int((a - since) // step)
    while a < b and k < len(bins):
        edge = min(b, since + (k + 1) * step)
        if edge > a:
            _accumulate(bins[k], cap, inst, edge - a)
        a = edge
        k += 1


def attempt_spans(*, start: float, end: float, gpus: float, progress_start: float | None = None,
                  kept_until: float | None = None, stop_at: float | None = None, failed: bool = False,
                  idle: list[tuple[float, float]] = (), **labels) -> list[Span]:
    """The use spans of one attempt of a task (or gang) that held `gpus` GPUs from `start` to `end`.

    progress_start: first progress (the process started); [start, progress_start) is grace_and_startup
        (None = start). kept_until: the work up to here was kept (None = all of it, the attempt succeeded or
        is still running); from there to the stop it is lost_to_failure. stop_at: the stop began (cancel,
        preemption, failure of a sibling): [stop_at, end) is grace_and_startup, unless `failed`: the attempt
        failed at stop_at and held its GPUs until `end` (detection, stop), lost_to_failure.
    idle: (from, to) intervals of the useful part where the GPUs were under the idle threshold:
        idle_allocated instead of useful.
    Raises ValueError when end < start or gpus < 0."""
    if end < start or gpus < 0:
        raise ValueError(f"an attempt needs start <= end and gpus >= 0, got {start}, {end}, {gpus}")
    out = []
    p = min(max(start if progress_start is None else progress_start, start), end)
    stop = end if stop_at is None else min(max(stop_at, p), end)
    kept = stop if kept_until is None else min(max(kept_until, p), stop)

    def put(a, b, bucket):
        if b > a:
            out.append(Span.of(a, b, gpus, bucket, **labels))

    put(start, p, "grace_and_startup")
    # useful part [p, kept) minus the idle intervals
    cur = p
    for a, b in sorted(idle):
        a, b = max(a, cur), min(b, kept)
        if b <= a:
            continue
        put(cur, a, "useful")
        put(a, b, "idle_allocated")
        cur = b
    put(cur, kept, "useful")
    put(kept, stop, "lost_to_failure")
    put(stop, end, "lost_to_failure" if failed else "grace_and_startup")
    return out
