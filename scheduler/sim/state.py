"""Incremental cluster state of a replay: which GPUs of which node are held by which job.

The state is kept in plain dicts and sets and turned into a frozen `Snapshot` each cycle. Only nodes
whose allocation changed since the previous snapshot get a new `NodeInfo`; job records are built once
(at submit, and again at start), so a snapshot costs O(nodes + live jobs) tuple copies, not object
construction. Binding a GPU that is already used, or a gang below its `min_available`, raises
AssertionError: the replay is a safety net for the engine, not a place to paper over its bugs.

Units: GPUs, millicores, MiB, seconds of simulated time.
"""
from __future__ import annotations

from dataclasses import fields, replace
from operator import attrgetter

from clusterspec.spec import ClusterSpec, TraceJob
from scheduler.core.jobindex import JobCounts, with_facts
from scheduler.core.snapshot import (
    Binding, DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot,
)

ROLE = "worker"  # trace jobs have one role
# NodeInfo's fields in order, and where those a snapshot sets are (ClusterState.snapshot builds a changed node
# positionally from its base's fields: the same object as dataclasses.replace gives, at half the cost)
_NODE_FIELDS = tuple(f.name for f in fields(NodeInfo))
_USED, _CPU, _MEM, _STATE, _SPARE = map(_NODE_FIELDS.index, ("used", "cpu_used", "memory_used", "state", "spare"))
# JobInfo's fields read at once, and each field's slot setter (_job_with)
_JOB_FIELDS = tuple(f.name for f in fields(JobInfo))
_job_values = attrgetter(*_JOB_FIELDS)
_JOB_SET = {name: getattr(JobInfo, name).__set__ for name in _JOB_FIELDS}
_job_setters = tuple(_JOB_SET.values())
# _job_with sets the slots directly: a JobInfo that gained a __post_init__ (a check or a derived field) would be
# built without it, so this says so at import (review 11, S7)
assert not hasattr(JobInfo, "__post_init__"), "JobInfo has a __post_init__: _job_with must call it (or use replace)"


def _job_with(job: JobInfo, **changes) -> JobInfo:
    """dataclasses.replace(job, **changes) for a JobInfo (frozen, slots, no __post_init__, every field in
    __init__): the same value, its slots set directly instead of through replace's field walk and __init__."""
    if type(job) is not JobInfo:
        return replace(job, **changes)
    new = object.__new__(JobInfo)
    for set_, value in zip(_job_setters, _job_values(job)):
        set_(new, value)
    for name, value in changes.items():
        _JOB_SET[name](new, value)
    return new


def job_info(job: TraceJob, time_limit: float | None = None) -> JobInfo:
    """The pending JobInfo of a trace job (one role, min_available = tasks unless stated; a one-GPU task with
    gpu_milli < 1000 asks for that fraction of a GPU, RoleInfo.gpu_milli);
    time_limit in seconds, as the user would declare it (None = none declared)."""
    min_available = job.tasks if job.min_available is None else job.min_available
    fraction = job.gpu_milli if job.gpus_per_task == 1 and 0 < job.gpu_milli < 1000 else 0
    role = RoleInfo(
        name=ROLE, tasks=job.tasks, gpus_per_task=job.gpus_per_task, min_available=min_available,
        cpu_milli=job.cpu_milli, memory_mib=job.memory_mib, flavors=tuple(job.flavors), gpu_milli=fraction,
    )
    return JobInfo(
        id=job.id, queue=job.queue, roles=(role,), priority=job.priority, submit_time=job.submit,
        name=job.id, time_limit=time_limit,
    )


def queue_infos(cluster: ClusterSpec, extra: set[str] = frozenset()) -> tuple[QueueInfo, ...]:
    """Queues of the cluster as QueueInfo; `extra` names used by the trace but absent from the
    cluster are added without quotas (the report notes them)."""
    out = [
        QueueInfo(
            name=q.name, parent=q.parent, weight=q.weight,
            quotas={f: QuotaInfo(guarantee=g, quota=d, limit=lim) for f, (g, d, lim) in q.quotas.items()},
        )
        for q in cluster.queues
    ]
    out.extend(QueueInfo(name=name) for name in sorted(extra))
    return tuple(out)


class _Jobs(dict):
    """job id -> JobInfo, counting its jobs in a JobCounts (shared by the pending and the running jobs) on every
    change, so that each snapshot carries their figures (core.jobindex.FactTuple) without a pass over them."""

    __slots__ = ("counts",)

    def __init__(self, counts: JobCounts):
        super().__init__()
        self.counts = counts

    def __setitem__(self, key, job) -> None:
        old = self.get(key)
        if old is not None:
            self.counts.remove(old)
        dict.__setitem__(self, key, job)
        self.counts.add(job)

    def __delitem__(self, key) -> None:
        self.counts.remove(self[key])
        dict.__delitem__(self, key)

    def pop(self, key, *default):
        if key not in self:
            return dict.pop(self, key, *default)
        job = dict.pop(self, key)
        self.counts.remove(job)
        return job

    def _untracked(self, *args, **kwargs):
        raise TypeError("set or delete jobs one at a time (their counts are kept per change)")

    clear = update = setdefault = popitem = __ior__ = _untracked


_ABSENT = object()  # _Pending.changes: the key had no job at the last mark


class _Recorded(_Jobs):
    """A _Jobs recording, per key changed since the last `mark`, the job it had then (`changes`; _ABSENT: none):
    the removals here, the writes in each subclass."""

    __slots__ = ("changes",)

    def __init__(self, counts: JobCounts):
        super().__init__(counts)
        self.changes: dict = {}

    def __delitem__(self, key) -> None:
        if key not in self.changes and key in self:
            self.changes[key] = self[key]
        _Jobs.__delitem__(self, key)

    def pop(self, key, *default):
        if key not in self.changes and key in self:
            self.changes[key] = self[key]
        return _Jobs.pop(self, key, *default)


class _Live(_Recorded):
    """The jobs not pending (a _Recorded), so that `mark` gives the jobs that came and went since the last one (in
    no particular order) without a pass over the jobs."""

    __slots__ = ()

    def __setitem__(self, key, job) -> None:
        if key not in self.changes:
            self.changes[key] = self.get(key, _ABSENT)
        _Jobs.__setitem__(self, key, job)

    def mark(self) -> tuple:
        """(jobs that came, jobs that went) since the last mark; starts a new record."""
        changes = self.changes
        self.changes = {}
        came, gone = [], []
        get = self.get
        for key, old in changes.items():
            new = get(key, _ABSENT)
            if new is not old:
                if old is not _ABSENT:
                    gone.append(old)
                if new is not _ABSENT:
                    came.append(new)
        return came, gone


class _Pending(_Recorded):
    """The pending jobs (a _Recorded), also recording what changed since the last `mark`: per key changed, the job it
    had then (`changes`), and the keys set while absent, in order (`appended`: such a key goes to the dict's end).
    `delta` gives the jobs that came and went since the mark (core.cache.PendingChanges' terms) without a pass
    over the jobs."""

    __slots__ = ("appended",)

    def __init__(self, counts: JobCounts):
        super().__init__(counts)
        self.appended: list = []

    def __setitem__(self, key, job) -> None:
        old = self.get(key, _ABSENT)
        if key not in self.changes:
            self.changes[key] = old
        if old is _ABSENT:
            self.appended.append(key)
        _Jobs.__setitem__(self, key, job)

    def mark(self) -> tuple | None:
        """(jobs that came, in dict order; jobs that went) since the last mark, or None when some key kept its
        place but got another job (its place in the order is not known here); starts a new record."""
        changes, appended = self.changes, self.appended
        self.changes, self.appended = {}, []
        if not changes:
            return (), ()
        gone = []
        get = self.get
        for key, old in changes.items():
            new = get(key, _ABSENT)
            if new is old:
                continue
            if old is not _ABSENT:
                gone.append(old)
                if new is not _ABSENT and key not in appended:  # replaced in place (never absent since the mark)
                    return None
        tail = {}  # the keys set while absent, in the order of their last insertion (the dict's order at its end)
        for key in appended:
            tail.pop(key, None)
            tail[key] = None
        came = []
        for key in tail:
            new = get(key, _ABSENT)
            if new is not _ABSENT and new is not changes[key]:
                came.append(new)
        return came, gone


class ClusterState:
    """GPUs in use per node, live jobs, and the snapshot built from them."""

    def __init__(self, cluster: ClusterSpec, queues: tuple[QueueInfo, ...]):
        nodes = tuple(
            NodeInfo(
                name=n.name, flavor=n.flavor, gpus=n.gpus, domain=n.domain, gpu_numa=tuple(n.gpu_numa),
                cpu_milli=n.cpu_milli, memory_mib=n.memory_mib,
                gpu_modes=(n.gpu_sharing,) * n.gpus if n.gpu_sharing != "exclusive" else (),
            )
            for n in cluster.nodes
        )
        self._setup(nodes, tuple(DomainInfo(d.name, d.tier, d.parent) for d in cluster.domains), queues)

    @classmethod
    def from_infos(cls, nodes: tuple[NodeInfo, ...], domains: tuple[DomainInfo, ...],
                   queues: tuple[QueueInfo, ...]) -> ClusterState:
        """A state over the engine's own types (test worlds, scheduler.sim.scenario): each node keeps its
        state, unhealthy GPUs and `used` GPUs / CPU / memory (held by something outside the jobs here)."""
        state = cls.__new__(cls)
        state._setup(tuple(nodes), tuple(domains), queues)
        return state

    def _setup(self, nodes: tuple[NodeInfo, ...], domains: tuple[DomainInfo, ...], queues: tuple[QueueInfo, ...]):
        self.domains = domains
        self.queues = queues
        self._base = {n.name: n for n in nodes}
        self._order = {name: i for i, name in enumerate(self._base)}
        self._nodes = list(self._base.values())  # current NodeInfo per node, in cluster order
        self._used: dict[str, set[int]] = {n.name: set(n.used) for n in nodes}
        self._cpu: dict[str, int] = {n.name: n.cpu_used for n in nodes}
        self._mem: dict[str, int] = {n.name: n.memory_used for n in nodes}
        self._dirty: set[str] = set()
        self._node_args: dict[str, list] = {}  # node -> its base NodeInfo's fields, in order (snapshot)
        self._state: dict[str, str] = {n.name: n.state for n in nodes}
        self.capacity = sum(n.gpus for n in self._nodes)  # GPUs of the cluster (all nodes, up or down)
        self.down_gpus = sum(n.gpus for n in nodes if n.state != "ready")  # GPUs of nodes not ready
        self.used_gpus = 0
        self.queue_used: dict[str, int] = {}  # queue -> GPUs held by its jobs (running, preempting, partial)
        self.counts = JobCounts()  # figures of the pending and running jobs (core.jobindex), kept per change
        self.pending: dict = _Pending(self.counts)  # job id -> JobInfo, in submit order
        self._token = None  # the last snapshot's mark (FactTuple.pending_changes)
        self.running: dict = _Live(self.counts)  # job id -> JobInfo (state running or preempting, with placement)
        self._held: set = set()  # pending job ids with GPUs held for them
        self.partial_gpus = 0  # GPUs bound to tasks of pending jobs whose gang is not complete (gang=False)
        self._hold_gpus: dict = {}  # node -> its GPUs nominated for pending jobs (set_holds)
        self._holds_given: dict = {}  # the holds set_holds was last given (job id -> placements)
        self.version = 0  # bumped whenever GPUs are bound, released or nominated (reserved_gpus' cache key)
        self._reserved = (-1, 0)
        self.down_nodes: set = {n.name for n in nodes if n.state != "ready"}
        # hot spares (set_spare; NodeInfo.spare of a live snapshot's nodes): the engine places only interruptible
        # jobs there; spare_gpus: their GPUs (idle or running interruptible jobs: spare_idle_gpus)
        self.spare_nodes: set = {n.name for n in nodes if n.spare}
        self.spare_gpus = sum(n.gpus for n in nodes if n.spare)
        self.shares: dict[tuple[str, int], int] = {}  # (node, GPU) -> thousandths held by fractions (sharing.py)
        self.mig_used: set[str] = set()  # MIG instance UUIDs held

    # -- jobs -------------------------------------------------------------------------------------
    def static_nodes(self) -> tuple[NodeInfo, ...]:
        """The cluster's nodes as given (flavor, GPUs, domain: its static shape), whatever their state now."""
        return tuple(self._base.values())

    def submit(self, info: JobInfo) -> None:
        """A new pending job (it may already hold GPUs: `reserved`, kept until set_holds says otherwise)."""
        assert info.id not in self.pending and info.id not in self.running, f"duplicate job id {info.id!r}"
        self.pending[info.id] = info
        if info.reserved:
            self._held.add(info.id)

    def adopt(self, info: JobInfo) -> None:
        """A job already running (or preempting) whose GPUs, CPU and memory are already counted in its
        nodes' `used` (a live snapshot's, scheduler.forecast): it is tracked from here on, and `release`
        frees its GPUs as for a job this state bound itself."""
        assert info.id not in self.pending and info.id not in self.running, f"duplicate job id {info.id!r}"
        self.running[info.id] = info
        gpus = sum(len(t.gpus) for t in info.placement)
        self.used_gpus += gpus
        self.queue_used[info.queue] = self.queue_used.get(info.queue, 0) + gpus

    def snapshot(self, now: float) -> Snapshot:
        """A frozen view of the current state at simulated time `now` (seconds)."""
        args = self._node_args
        for name in self._dirty:  # replace(base, used=..., cpu_used=..., memory_used=..., state=..., spare=...)
            a = args.get(name)
            if a is None:
                base = self._base[name]
                a = args[name] = [getattr(base, f) for f in _NODE_FIELDS]
            a = a[:]
            a[_USED], a[_CPU], a[_MEM], a[_STATE], a[_SPARE] = (
                frozenset(self._used[name]), self._cpu[name], self._mem[name], self._state[name],
                name in self.spare_nodes)
            self._nodes[self._order[name]] = NodeInfo(*a)
        self._dirty.clear()
        delta, token = self.pending.mark(), object()  # the pending jobs that came and went since the last snapshot
        given = None if delta is None or self._token is None else (self._token, token, *delta)
        # a list, not a tuple: with_facts copies it into its FactTuple once (a tuple here is a second copy: 2x)
        came, gone = self.running.mark()  # the jobs not pending that came and went since the last snapshot
        live = None if self._token is None else (self._token, token, came, gone)
        jobs = with_facts([*self.running.values(), *self.pending.values()], self.counts, len(self.running),
                          unique_ids=True,  # two dicts by job id, a job in one of them only
                          pending_changes=given, live_changes=live)
        self._token = token
        return Snapshot(nodes=tuple(self._nodes), domains=self.domains, queues=self.queues, jobs=jobs, now=now)

    def bind(self, binding: Binding, now: float, *, gang: bool = True) -> JobInfo | None:
        """Start a pending job on the binding's GPUs at `now`. Checks every GPU first, then applies.

        gang=False (engines without gang scheduling, e.g. core.baselines.run_cycle_kube): the binding may
        hold only some tasks; they are added to the pending job's `placement` (their GPUs held at once)
        and the job starts when every task of every role is placed. Returns the started JobInfo, or None
        while the job is still partial."""
        job = self.pending.get(binding.job_id)
        assert job is not None, f"engine bound job {binding.job_id!r}, which is not pending"
        if any(t.gpu_milli or t.mig for t in binding.tasks):  # an engine that shares GPUs placed it
            return self._bind_shared(job, binding, now)
        # else whole GPUs, also for a fractional request placed by an engine that does not share GPUs
        # (core.baselines: a kube-scheduler without a sharing plugin gives a 0.5-GPU pod one whole GPU)
        roles = {r.name: r for r in job.roles}
        seen_tasks: set[tuple[str, int]] = {(t.role, t.index) for t in job.placement}
        taken: set[tuple[str, int]] = set()
        per_role = dict.fromkeys(roles, 0)
        for t in binding.tasks:
            role = roles.get(t.role)
            assert role is not None, f"job {job.id!r}: unknown role {t.role!r}"
            assert 0 <= t.index < role.tasks and (t.role, t.index) not in seen_tasks, (
                f"job {job.id!r}: bad or repeated task {t.role}[{t.index}]")
            seen_tasks.add((t.role, t.index))
            assert len(t.gpus) == role.gpus_per_task, (
                f"job {job.id!r}: task {t.role}[{t.index}] got {len(t.gpus)} GPUs, wants {role.gpus_per_task}")
            node = self._base.get(t.node)
            assert node is not None, f"job {job.id!r}: unknown node {t.node!r}"
            assert not role.flavors or node.flavor in role.flavors, (
                f"job {job.id!r}: node {t.node} flavor {node.flavor} not in {role.flavors}")
            for g in t.gpus:
                assert 0 <= g < node.gpus, f"job {job.id!r}: GPU {t.node}/{g} does not exist"
                assert g not in self._used[t.node] and (t.node, g) not in taken, (
                    f"job {job.id!r}: GPU {t.node}/{g} is already bound")
                taken.add((t.node, g))
            per_role[t.role] += 1
        for t in job.placement:  # tasks bound by earlier partial bindings (gang=False only)
            per_role[t.role] += 1
        complete = all(per_role[name] >= role.tasks for name, role in roles.items())
        if gang:
            for name, role in roles.items():
                assert per_role[name] >= role.effective_min, (
                    f"job {job.id!r}: partial gang, role {name} got {per_role[name]} tasks, "
                    f"min_available {role.effective_min}")
        self._occupy(roles, binding.tasks)
        self.used_gpus += len(taken)
        self.version += 1
        self.queue_used[job.queue] = self.queue_used.get(job.queue, 0) + len(taken)
        if not gang:
            placement = (*job.placement, *binding.tasks)
            if not complete:
                self.partial_gpus += len(taken)
                self.pending[job.id] = replace(job, placement=placement)
                return None
            self.partial_gpus -= sum(len(t.gpus) for t in job.placement)
            binding = replace(binding, tasks=placement)
        del self.pending[job.id]
        started = _job_with(job, state="running", placement=tuple(binding.tasks), start_time=now, reserved=())
        self.running[job.id] = started
        return started

    def _bind_shared(self, job: JobInfo, binding: Binding, now: float) -> JobInfo:
        """Start a job of fractions or MIG instances (scheduler/core/sharing.py), possibly with whole-GPU roles (a
        mixed job): every task's share fits its GPU (at most 1000 thousandths, never on a GPU held whole), every
        MIG instance free, every whole-GPU task on GPUs held by nothing (no task, no fraction), the gang complete."""
        roles = {r.name: r for r in job.roles}
        per_role = dict.fromkeys(roles, 0)
        add: dict[tuple[str, int], int] = {}
        instances: set[str] = set()
        whole: set[tuple[str, int]] = set()
        for t in binding.tasks:
            role = roles.get(t.role)
            assert role is not None, f"job {job.id!r}: bad role {t.role!r}"
            node = self._base.get(t.node)
            assert node is not None, f"job {job.id!r}: unknown node {t.node!r}"
            assert not role.flavors or node.flavor in role.flavors, f"job {job.id!r}: wrong flavor on {t.node}"
            if not role.shares:
                assert not t.gpu_milli and not t.mig and len(t.gpus) == role.gpus_per_task, (
                    f"job {job.id!r}: task {t.role}[{t.index}] got {len(t.gpus)} GPUs, wants {role.gpus_per_task}")
                for g in t.gpus:
                    key = (t.node, g)
                    assert 0 <= g < node.gpus and g not in self._used[t.node] and key not in whole, (
                        f"job {job.id!r}: GPU {t.node}/{g} is already bound")
                    assert key not in self.shares and key not in add, f"GPU {t.node}/{g} holds a fraction"
                    whole.add(key)
            elif role.mig_profile:
                assert len(t.mig) == role.gpus_per_task, f"job {job.id!r}: wrong MIG instance count"
                for uuid in t.mig:
                    assert uuid not in self.mig_used and uuid not in instances, f"MIG {uuid} is already bound"
                    instances.add(uuid)
            else:
                assert len(t.gpus) == 1 and 0 < t.gpu_milli <= 1000, f"job {job.id!r}: bad share {t}"
                key = (t.node, t.gpus[0])
                assert t.gpus[0] not in self._used[t.node] and key not in whole, f"GPU {t.node}/{t.gpus[0]} is held whole"
                add[key] = add.get(key, 0) + t.gpu_milli
                assert self.shares.get(key, 0) + add[key] <= 1000, f"GPU {t.node}/{t.gpus[0]} over-committed"
            per_role[t.role] += 1
        for name, role in roles.items():
            assert per_role[name] >= role.effective_min, f"job {job.id!r}: partial gang in role {name}"
        for key, milli in add.items():
            self.shares[key] = self.shares.get(key, 0) + milli
        self.mig_used |= instances
        for t in binding.tasks:
            if not roles[t.role].shares:
                self._used[t.node].update(t.gpus)
            self._cpu[t.node] += roles[t.role].cpu_milli
            self._mem[t.node] += roles[t.role].memory_mib
            self._dirty.add(t.node)
        self.used_gpus += len(whole)
        self.version += 1
        self.queue_used[job.queue] = (self.queue_used.get(job.queue, 0) + sum(add.values()) / 1000 + len(instances)
                                      + len(whole))
        del self.pending[job.id]
        started = _job_with(job, state="running", placement=tuple(binding.tasks), start_time=now, reserved=())
        self.running[job.id] = started
        return started

    def largest_whole_block(self) -> int:
        """The largest runnable whole-GPU job on one node now: the most GPUs of one ready node that hold no task
        and no fraction (healthy or not: the replay's nodes report no GPU health)."""
        shared: dict[str, set[int]] = {}
        for node, g in self.shares:
            shared.setdefault(node, set()).add(g)
        return max((n.gpus - len(self._used[n.name] | shared.get(n.name, set())) for n in self._base.values()
                    if self._state[n.name] == "ready"), default=0)

    def _release_share(self, job: JobInfo, t) -> None:
        """Free one sharing task's fraction or MIG instances (release)."""
        if t.gpu_milli:
            key = (t.node, t.gpus[0])
            left = self.shares.get(key, 0) - t.gpu_milli
            if left > 0:
                self.shares[key] = left
            else:
                self.shares.pop(key, None)
            self.queue_used[job.queue] -= t.gpu_milli / 1000
        self.mig_used.difference_update(t.mig)
        self.queue_used[job.queue] -= len(t.mig)

    def _occupy(self, roles: dict, tasks) -> None:
        """Mark the (already checked) tasks' GPUs, CPU and memory used on their nodes."""
        for t in tasks:
            role = roles[t.role]
            self._used[t.node].update(t.gpus)
            self._cpu[t.node] += role.cpu_milli
            self._mem[t.node] += role.memory_mib
            self._dirty.add(t.node)

    def release(self, job_id) -> JobInfo:
        """Free every GPU of a running job (completion or eviction) and forget it."""
        job = self.running.pop(job_id)
        roles = {r.name: r for r in job.roles}
        for t in job.placement:
            self._cpu[t.node] -= roles[t.role].cpu_milli
            self._mem[t.node] -= roles[t.role].memory_mib
            self._dirty.add(t.node)
            if t.gpu_milli or t.mig:
                self._release_share(job, t)
                continue
            used = self._used[t.node]
            used.difference_update(t.gpus)
            self.used_gpus -= len(t.gpus)
            self.queue_used[job.queue] -= len(t.gpus)
        self.version += 1
        return job

    def mark_preempting(self, job_id, beneficiary=None, deadline: float | None = None) -> JobInfo:
        """A running job starts its grace period: it keeps its GPUs, and the engine sees them as
        being released (so it may hold them for the eviction's `beneficiary`); `deadline`: when they come free
        (seconds; JobInfo.stop_deadline), None when the caller does not say."""
        job = replace(self.running[job_id], state="preempting", evicted_for=beneficiary, stop_deadline=deadline)
        self.running[job_id] = job
        return job

    def withdraw(self, job_id) -> JobInfo:
        """An eviction is taken back during its grace period: the job runs on (no restart)."""
        job = replace(self.running[job_id], state="running", evicted_for=None, stop_deadline=None)
        self.running[job_id] = job
        return job

    def merge_back(self, releasing_id, job_id) -> JobInfo:
        """Tasks split off for release (`split_off`) return to their job, which runs on with them."""
        releasing = self.running.pop(releasing_id)
        job = self.running[job_id]
        placement = tuple(sorted((*job.placement, *releasing.placement), key=lambda t: (t.role, t.index)))
        job = replace(job, placement=placement)
        self.running[job_id] = job
        return job

    def grow(self, binding: Binding) -> JobInfo:
        """Add new tasks to a running job (the engine's `growths`): checked like a bind, then applied."""
        job = self.running.get(binding.job_id)
        assert job is not None and job.state == "running", f"grow of {binding.job_id!r}, which is not running"
        roles = {r.name: r for r in job.roles}
        have = {(t.role, t.index) for t in job.placement}
        seen: set = set()
        for t in binding.tasks:
            role = roles.get(t.role)
            assert role is not None and 0 <= t.index < role.tasks, f"job {job.id!r}: bad task {t.role}[{t.index}]"
            assert (t.role, t.index) not in have, f"job {job.id!r}: task {t.role}[{t.index}] already runs"
            assert len(t.gpus) == role.gpus_per_task, f"job {job.id!r}: wrong GPU count for {t.role}[{t.index}]"
            for g in t.gpus:
                assert g not in self._used[t.node] and (t.node, g) not in seen, f"GPU {t.node}/{g} is already bound"
                seen.add((t.node, g))
            have.add((t.role, t.index))
        self._occupy(roles, binding.tasks)
        self.used_gpus += len(seen)
        self.queue_used[job.queue] = self.queue_used.get(job.queue, 0) + len(seen)
        job = replace(job, placement=tuple(sorted((*job.placement, *binding.tasks), key=lambda t: (t.role, t.index))))
        self.running[job.id] = job
        return job

    def shrink(self, job_id, tasks: set[tuple[str, int]]) -> tuple[JobInfo, int]:
        """Free the given (role, index) tasks of a live job, which runs on with the rest.
        Returns the job and the GPUs freed."""
        job = self.running[job_id]
        roles = {r.name: r for r in job.roles}
        keep, freed = [], 0
        for t in job.placement:
            if (t.role, t.index) not in tasks:
                keep.append(t)
                continue
            self._used[t.node].difference_update(t.gpus)
            self._cpu[t.node] -= roles[t.role].cpu_milli
            self._mem[t.node] -= roles[t.role].memory_mib
            self._dirty.add(t.node)
            freed += len(t.gpus)
        self.used_gpus -= freed
        self.version += 1
        self.queue_used[job.queue] -= freed
        job = replace(job, state="running", placement=tuple(keep))
        self.running[job_id] = job
        return job, freed

    def split_off(self, job_id, tasks: set[tuple[str, int]], releasing_id, beneficiary=None) -> JobInfo:
        """Move the given (role, index) tasks of a running job into a job of their own, `releasing_id`, in
        state "preempting": their GPUs stay used until `release(releasing_id)`, and the job runs on with the
        rest (how the platform shows surplus tasks being released). Returns the releasing job."""
        job = self.running[job_id]
        out = tuple(t for t in job.placement if (t.role, t.index) in tasks)
        keep = tuple(t for t in job.placement if (t.role, t.index) not in tasks)
        self.running[job_id] = replace(job, placement=keep)
        releasing = replace(job, id=releasing_id, state="preempting", placement=out, evicted_for=beneficiary,
                            part_of=job_id)
        self.running[releasing_id] = releasing
        return releasing

    def requeue(self, job: JobInfo) -> None:
        """Put an evicted (already released) job back in the pending set, keeping its submit time and the
        GPUs held for it (a job moved by rescheduling restarts on its new place)."""
        self.pending[job.id] = replace(job, state="pending", placement=(), start_time=None,
                                       reserved=job.reserved, attempts=job.attempts + 1, evicted_for=None,
                                       stop_deadline=None)

    def set_holds(self, holds: dict) -> None:
        """GPUs held for pending jobs (the engine's nominations in force): job id -> placements; a hold on a
        running (preempting) job is the new place of a job being moved, kept on it until it is requeued."""
        if not holds and not self._held and not self._holds_given:
            return  # no hold before or now (most cycles): nothing below would change
        for job_id in self._held - holds.keys():
            if job_id in self.pending:
                self.pending[job_id] = replace(self.pending[job_id], reserved=())
        for job_id in self._held - holds.keys():
            if job_id in self.running and self.running[job_id].reserved:
                self.running[job_id] = replace(self.running[job_id], reserved=())
        for job_id, tasks in holds.items():
            job = self.pending.get(job_id)
            if job is not None and job.reserved != tuple(tasks):
                self.pending[job_id] = replace(job, reserved=tuple(tasks))
            elif job is None and job_id in self.running:  # a job being moved: its new place (rescheduling)
                self.running[job_id] = replace(self.running[job_id], reserved=tuple(tasks))
        self._held = set(holds)
        if holds != self._holds_given:  # (most cycles nominate the same holders on the same tasks again)
            self._holds_given = dict(holds)
            per_node: dict = {}  # whole GPUs held (a held share is not a GPU), per node
            for tasks in holds.values():
                for t in tasks:
                    if t.gpus and not (t.gpu_milli or t.mig):
                        on = per_node.get(t.node)
                        if on is None:
                            per_node[t.node] = set(t.gpus)
                        else:
                            on.update(t.gpus)
            self._hold_gpus = per_node
        self.version += 1

    def drop(self, job_id) -> JobInfo:
        """Remove a pending job for good (rejected by the engine), freeing GPUs its partially bound
        tasks hold (gang=False engines)."""
        job = self.pending.pop(job_id)
        if job.placement:
            self.partial_gpus -= sum(len(t.gpus) for t in job.placement)
            self.running[job_id] = job
            self.release(job_id)
        return job

    # -- nodes ------------------------------------------------------------------------------------
    def set_node_state(self, name: str, state: str) -> None:
        """Mark a node "ready" or down ("not_ready": failed or under repair). A down node takes no new
        work; the jobs on it keep their GPUs until the replay releases them. A spare leaves the spare pool
        first (set_spare)."""
        assert name not in self.spare_nodes, f"node {name} is a spare: set_spare(name, False) first"
        was = self._state[name]
        if was == state:
            return
        self._state[name] = state
        self._dirty.add(name)
        gpus = self._base[name].gpus
        self.down_gpus += (state != "ready") * gpus - (was != "ready") * gpus
        if state != "ready":
            self.down_nodes.add(name)
        else:
            self.down_nodes.discard(name)

    def set_spare(self, name: str, spare: bool) -> None:
        """Make an idle, ready node a hot spare (NodeInfo.spare: the engine places only interruptible jobs on
        it; not down) or give it back to the pool of ready nodes (its jobs run on). Raises AssertionError for
        a new spare that is down or busy."""
        if spare == (name in self.spare_nodes):
            return
        gpus = self._base[name].gpus
        if spare:
            assert name not in self.down_nodes and not self._used[name], f"spare {name} must be up and idle"
            self.spare_nodes.add(name)
            self.spare_gpus += gpus
        else:
            self.spare_nodes.discard(name)
            self.spare_gpus -= gpus
        self._dirty.add(name)

    def spare_idle_gpus(self) -> int:
        """GPUs of the hot spares that no job holds (held for recovery in the GPU-hour ledger)."""
        return sum(self._base[n].gpus - len(self._used[n]) for n in self.spare_nodes)

    def reserved_gpus(self) -> int:
        """Nominated GPUs (held for pending jobs) that no job uses now: a nomination may cover GPUs its
        victims or a draining job still hold; those count as theirs."""
        if self._reserved[0] != self.version:
            used = self._used  # per node, the held GPUs less those in use (C-level set differences)
            self._reserved = (self.version, sum(map(len, map(set.difference, self._hold_gpus.values(),
                                                             map(used.__getitem__, self._hold_gpus)))))
        return self._reserved[1]

    def down_unallocated_gpus(self) -> int:
        """GPUs of down nodes that no job holds (a failed job keeps its GPUs until it is released: those
        count as its own, lost to the failure)."""
        return sum(self._base[n].gpus - len(self._used[n]) for n in self.down_nodes)

    def jobs_on(self, name: str) -> list:
        """Ids of running or preempting jobs with a task on node `name`, in start order."""
        return [job_id for job_id, job in self.running.items() if any(t.node == name for t in job.placement)]
