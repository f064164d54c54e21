"""A fingerprint of every decision a replay's engine made, to prove a speed-up changed none of them.

    engine, digest = recording_engine(engine)     # wrap; replay(..., engine=engine); digest.hexdigest()
    replay_digest(cluster, trace, **replay_kw) -> (hex digest, report, cycles)

Each cycle's CycleResult is written in a canonical text form and fed to one SHA-256: the bindings (job,
tasks with nodes and GPU indices, domain, tier, rule, shares before / after), growths, evictions,
withdrawals, nominations, moves, advice, the pending reason of every job that did not start (sorted by
job id: code, message, terminal), the backfill estimates, the fair shares and every metric. Floats are
written with repr (exact), so two runs agree only when every decision and figure is bit-identical. The
timings are left out (wall clock). Two engines whose digests agree over a replay made the same decisions
in the same order at the same simulated times (the replay feeds each cycle's result back into the state).

Pure: no Django, no I/O.
"""
from __future__ import annotations

import hashlib
import json
from functools import partial
from typing import Callable

from clusterspec.spec import ClusterSpec, Trace
from scheduler.core import EngineCache, run_cycle
from scheduler.core.snapshot import CycleConfig, CycleResult, Snapshot


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))


def cycle_text(snapshot: Snapshot, result: CycleResult) -> str:
    """The canonical text of one cycle's result (module docstring), prefixed by its time and cycle."""
    pending = sorted(((str(k), r.code, r.message, r.terminal) for k, r in result.pending.items()))
    metrics = {k: v for k, v in result.metrics.items()}
    parts = [
        repr(snapshot.now), repr(snapshot.cycle),
        repr(result.bindings), repr(result.growths), repr(result.evictions), repr(result.withdrawals),
        repr(result.nominations), repr(result.moves), _canon(result.advice), _canon(result.decisions),
        repr(pending), _canon({str(k): v for k, v in result.estimated_start.items()}),
        _canon(result.fair_share), _canon(metrics),
    ]
    return "\n".join(parts)


class Digest:
    """A running SHA-256 over cycle texts, and the number of cycles seen."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.cycles = 0

    def add(self, snapshot: Snapshot, result: CycleResult) -> None:
        self._h.update(cycle_text(snapshot, result).encode())
        self._h.update(b"\x00")
        self.cycles += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def recording_engine(engine: Callable | None = None) -> tuple[Callable, Digest]:
    """(an engine that calls `engine` and records each result in the returned Digest, the Digest).
    engine None = the real one (run_cycle) with an EngineCache of its own, as `replay` makes."""
    if engine is None:
        engine = partial(run_cycle, cache=EngineCache())
    digest = Digest()

    def recorded(snapshot: Snapshot, config: CycleConfig) -> CycleResult:
        result = engine(snapshot, config)
        digest.add(snapshot, result)
        return result

    recorded.gang = getattr(engine, "gang", True)  # Replay reads it
    recorded.every_cycle = True  # Replay calls it every cycle, a settled one too (Replay.settled): each is recorded
    return recorded, digest


def replay_digest(cluster: ClusterSpec, trace: Trace, *, engine: Callable | None = None, **replay_kw):
    """Replay with a recording engine: (hex digest of every cycle's decisions, the ReplayReport, cycles)."""
    from scheduler.sim.replay import replay

    recorded, digest = recording_engine(engine)
    report = replay(cluster, trace, engine=recorded, **replay_kw)
    return digest.hexdigest(), report, digest.cycles
