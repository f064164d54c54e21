"""Multi-cycle scenarios over a test World, on the simulator's own state.

`ScenarioRunner` steps a `scheduler.core.testing.World` through simulated time with the real engine:
binding, evicting, releasing, requeueing and holding are done by `scheduler.sim.state.ClusterState`,
the same state the trace replay uses, so the tests and the replay cannot drift apart. It lives here, not
in scheduler.core.testing, because the engine must not depend on its simulator (core.testing re-exports
it for the tests that import it from there).

Units: seconds of simulated time, GPUs.
"""
from __future__ import annotations

from dataclasses import replace

from scheduler.core import run_cycle
from scheduler.core.cache import EngineCache
from scheduler.core.snapshot import Binding, CycleConfig, CycleResult, Snapshot
from scheduler.core.testing import World, check_result
from scheduler.sim.state import ClusterState


class ScenarioRunner:
    """Runs cycles over a World in simulated time: submits jobs at their submit time, completes jobs with
    a duration (World.job / World.running `duration`), evicts victims gracefully (state "preempting" for
    `grace` seconds, then released; a whole gang is requeued with its original submit time and one more
    attempt, evicted surplus tasks are released on their own while the job runs on), keeps nominations as
    the holders' `reserved` GPUs, and checks `check_result` after every cycle. Pure and deterministic.

    history[i] = (now, CycleResult); started[job] = last start time; finished[job] = end time;
    evictions = every Eviction made, in order; placements[job] = its last placement. `running` and
    `pending` are the jobs running (not preempting) and pending now, by id. Elastic jobs grow by the
    engine's `growths`; withdrawn evictions (`withdrawals`, (time, Withdrawal)) put their victims back to
    running; `cancel(job, now)` is the user's cancel.
    """

    def __init__(self, world: World, *, config: CycleConfig | None = None, grace: float = 0.0):
        self.world, self.config, self.grace = world, config, grace
        self.durations = world.durations
        jobs = world.jobs
        running = [j for j in jobs if j.state != "pending"]
        # world.running() folded its jobs' GPUs into node.used; they are bound again below, at their start
        held: dict[str, set[int]] = {}
        for j in running:
            for t in j.placement:
                held.setdefault(t.node, set()).update(t.gpus)
        nodes = tuple(replace(n, used=n.used - held[n.name]) if n.name in held else n for n in world.node_infos)
        self.state = ClusterState.from_infos(nodes, world.domain_infos, world.queue_infos)
        self.cache = EngineCache()
        for j in running:
            self.state.submit(replace(j, state="pending", placement=(), start_time=None))
            self.state.bind(Binding(job_id=j.id, tasks=j.placement, domain="", tier=0), j.start_time)
        self.future = sorted((j for j in jobs if j.state == "pending"), key=lambda j: (j.submit_time, j.id))
        self.started: dict = {j.id: j.start_time or 0.0 for j in running}
        self.finished: dict = {}
        self.evictions: list = []
        self.placements: dict = {j.id: j.placement for j in running}  # last placement per job
        self.history: list[tuple[float, CycleResult]] = []
        self.releasing: dict = {}  # id in state.running -> (release time, whole gang: requeue it)
        self.withdrawals: list = []  # (time, Withdrawal) in order
        self.cancelled: dict = {}  # job id -> time the user cancelled it

    @property
    def running(self) -> dict:
        return {i: j for i, j in self.state.running.items() if j.state == "running"}

    @property
    def pending(self) -> dict:
        return self.state.pending

    def snapshot(self, now: float) -> Snapshot:
        return self.state.snapshot(now)

    def finish(self, job_id, now: float) -> None:
        """The job's work is done at `now`: its GPUs are freed."""
        self.state.release(job_id)
        self.finished[job_id] = now

    def _evict(self, ev, now: float) -> None:
        self.evictions.append(ev)
        if not ev.tasks:
            self.state.mark_preempting(ev.job_id, ev.beneficiary)
            self.releasing[ev.job_id] = (now + self.grace, True)
            return
        key = (ev.job_id, "tasks", len(self.evictions))
        self.state.split_off(ev.job_id, set(ev.tasks), key, ev.beneficiary)
        self.releasing[key] = (now + self.grace, False)

    def _withdraw(self, w, now: float) -> None:
        self.withdrawals.append((now, w))
        del self.releasing[w.job_id]
        if isinstance(w.job_id, tuple) and w.job_id[1:2] == ("tasks",):
            self.state.merge_back(w.job_id, w.job_id[0])
        else:
            self.state.withdraw(w.job_id)

    def cancel(self, job_id, now: float) -> None:
        """The user cancels a job at `now`: pending, it is dropped (its holds go with it); running, its GPUs
        are freed."""
        if job_id in self.state.pending:
            self.state.drop(job_id)
        elif job_id in self.state.running:
            self.state.release(job_id)
        else:
            self.future = [j for j in self.future if j.id != job_id]
        self.cancelled[job_id] = now

    def step(self, now: float) -> CycleResult:
        """One cycle at `now` (seconds), after the completions, releases and arrivals due by then."""
        state = self.state
        for job_id, job in list(state.running.items()):
            duration = self.durations.get(job_id)
            if job.state == "running" and duration is not None and self.started[job_id] + duration <= now:
                self.finish(job_id, now)
        for key, (release_at, whole) in list(self.releasing.items()):
            if release_at <= now:
                del self.releasing[key]
                job = state.release(key)
                if whole:
                    state.requeue(job)
        while self.future and self.future[0].submit_time <= now:
            state.submit(self.future.pop(0))
        snap = state.snapshot(now)
        result = run_cycle(snap, self.config, cache=self.cache)
        check_result(snap, result)
        for b in result.bindings:
            state.bind(b, now)
            self.started[b.job_id] = now
            self.placements[b.job_id] = b.tasks
        for b in result.growths:
            self.placements[b.job_id] = state.grow(b).placement
        for ev in result.evictions:
            self._evict(ev, now)
        for w in result.withdrawals:
            self._withdraw(w, now)
        state.set_holds({n.job_id: n.tasks for n in result.nominations})
        self.history.append((now, result))
        return result

    def run(self, *, until: float, every: float = 1.0, start: float = 0.0) -> ScenarioRunner:
        """step() at start, start + every, ... up to `until` (seconds)."""
        now = start
        while now <= until:
            self.step(now)
            now += every
        return self
