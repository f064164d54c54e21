"""The reads the pages and the API need: job lists, cluster summaries, trees, time series.

Every function returns plain values or lazy querysets; none writes. Who sees what is access.py's
(`visible_jobs`, `visible_team_ids`, ...), shared with the API's permissions.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter, itemgetter

from django.db import connection, transaction
from django.db.models import (
    BigIntegerField, Case, Count, F, IntegerField, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum, Value, When,
)
from django.db.models.functions import Cast, Coalesce

from .access import visible_jobs
from .gpu_request import as_gpus, from_milli, role_per_task, shared_gpu_memory
from .inputs import whole_number
from .models import (
    Allocation, ClusterSample, Domain, Event, Gpu, Job, JobRole, Node, Queue, QueueSample, Quota, SchedulerCycle, Task,
    Team,
)
from .trees import Tree


# --- jobs -------------------------------------------------------------------------------------------

def job_state_q(states) -> Q:
    """Jobs in any of `states`: Job.State values and the words for a stopping job (Job.STOPPING_WORDS:
    `cancelling` = preempting toward cancelled, `stopping` = toward failed, succeeded or a restart)."""
    plain = sorted(s for s in states if s not in Job.STOPPING_WORDS)
    q = Q(state__in=plain)
    for word in sorted(set(states) & set(Job.STOPPING_WORDS)):
        q |= Q(state=Job.State.PREEMPTING, stop_target__in=Job.STOPPING_WORDS[word])
    return q


def find_team(value) -> Team | None:
    """The one team a `?team=` filter names, everywhere (the API's lists and /api/v1/utilization/, the pages):
    the team whose slug is `value`, else the team whose name is `value`, else the team the value means by the team
    name rule (services.tenancy.team_named: letter case, '.', '_' and '-' ignored, so `?team=Foo_Bar` is the team
    `foo-bar`), else None. Team names and slugs are unique together by that rule, so a value is one team's; of rows
    stored before it (migration 0030), the exact slug wins, then the exact name, then the first by id."""
    if not isinstance(value, str) or not value:
        return None
    from .services.tenancy import team_named

    return Team.objects.filter(slug=value).first() or Team.objects.filter(name=value).first() or team_named(value)


def job_list(user, *, team: str | None = None, state: str | Sequence[str] | None = None, queue: str | None = None,
             submitter: str | None = None, search: str | None = None) -> QuerySet[Job]:
    """Jobs the user may see, newest first, filtered by team (name or slug), state, queue (name), submitter
    (username) and `search` (a job id, or text found in the name or the external id).

    State "finished" stands for every final state, "live" for admitted/running/preempting, "cancelling" and
    "stopping" for a preempting job that will end (job_state_q). `gpus_milli`
    (GPU-equivalents in thousandths, job_gpus_milli: the jobs page's GPUs column and sort) is annotated (a subquery, so the rows stay
    one per job and can be ordered and paged by it). Roles and the nodes of the tasks are prefetched, so a
    page of jobs costs a fixed number of queries.
    """
    qs = visible_jobs(user)
    if team:  # one team (find_team), as every ?team= filter resolves it
        found = find_team(team)
        qs = qs.filter(team_id=found.pk) if found is not None else qs.none()
    if state:  # one state or several (the jobs page's repeated ?state=, as the jobs API's)
        wanted = set()
        for s in ([state] if isinstance(state, str) else state):
            wanted.update(Job.FINAL_STATES if s == "finished" else Job.LIVE_STATES if s == "live" else (s,))
        qs = qs.filter(job_state_q(wanted))
    if queue:
        qs = qs.filter(queue__name=queue)
    if submitter:
        qs = qs.filter(submitter__username=submitter)
    if search and search.strip():
        text = search.strip()
        match = Q(name__icontains=text) | Q(external_id__icontains=text)
        number = whole_number(text.lstrip("#"))  # ASCII digits: '\u00b2'.isdigit() is True and int() a 500
        if number is not None and len(text) < 18:
            match |= Q(pk=number)
        qs = qs.filter(match)
    return (
        qs.select_related("team", "queue", "submitter")
        .annotate(gpus_milli=job_gpus_milli())
        .prefetch_related(
            Prefetch("roles", queryset=JobRole.objects.order_by("id")),
            Prefetch("tasks", queryset=Task.objects.select_related("node").only("id", "job_id", "node__name", "state")),
        )
        .order_by("-submitted_at", "-id")
    )


# --- GPU-equivalents in SQL -------------------------------------------------------------------------
# The SQL twins of gpu_request.gpu_equivalents, in thousandths of a GPU (integers: sums stay exact; turn them
# back into GPUs with gpu_request.from_milli). Every page, sample and metric that sums GPUs over many jobs uses
# these two, so a 0.25 share counts 0.25 everywhere, as the scheduler charges it against the queue's quota.

def role_gpu_milli(prefix: str = "", gpu_memory: int = 0):
    """Thousandths of a GPU-equivalent a JobRole row asks for (`prefix`: the path to the role, e.g. "roles__"):
    tasks x gpu_milli for a share; for a GPU-memory role, tasks x its share of a GPU of `gpu_memory` MiB rounded up
    (a pending job's: gpu_request.shared_gpu_memory, as job_gpus counts it; 0 when `gpu_memory` is 0: a bound
    one's share is its allocations'); else tasks x gpus_per_task x 1000 (whole GPUs, MIG instances)."""
    memory = Value(0)
    if gpu_memory > 0:  # ceil(mib * 1000 / gpu_memory) in integers, as scheduler.core.sharing.task_milli
        memory = F(f"{prefix}tasks") * ((Cast(F(f"{prefix}gpu_memory_mib"), BigIntegerField()) * 1000
                                         + (gpu_memory - 1)) / gpu_memory)
    return Case(When(**{f"{prefix}gpu_milli__gt": 0}, then=F(f"{prefix}tasks") * F(f"{prefix}gpu_milli")),
                When(**{f"{prefix}gpu_memory_mib__gt": 0}, then=memory),
                default=F(f"{prefix}tasks") * F(f"{prefix}gpus_per_task") * 1000, output_field=BigIntegerField())


def job_gpus_milli(gpu_memory: int | None = None):
    """A Job row's `gpus` (gpu_request.job_gpus) in thousandths of a GPU-equivalent, an integer the keyset cursor
    can carry: its roles' role_gpu_milli, and for its GPU-memory roles, while pending their share of a GPU of
    `gpu_memory` MiB (default shared_gpu_memory(), read once here), else what their live allocations hold. The jobs
    page sorts by it and shows it, so the order and the numbers are the jobs API's (new-user trial 16: the sort
    counted a memory share as 0)."""
    gpu_memory = shared_gpu_memory() if gpu_memory is None else gpu_memory
    roles = JobRole.objects.filter(job=OuterRef("pk")).order_by().values("job")
    memory = Q(gpu_memory_mib__gt=0, gpu_milli=0)
    plain = roles.exclude(memory).annotate(n=Sum(role_gpu_milli())).values("n")
    pending = roles.filter(memory).annotate(n=Sum(role_gpu_milli(gpu_memory=gpu_memory))).values("n")
    bound = (Allocation.objects.filter(job=OuterRef("pk"), released_at__isnull=True,  # the (job, released_at) index
                                       task__role__gpu_memory_mib__gt=0, task__role__gpu_milli=0)
             .order_by().values("job").annotate(n=Sum("gpu_milli")).values("n"))
    return (Coalesce(Subquery(plain, output_field=BigIntegerField()), 0)
            + Case(When(state=Job.State.PENDING, then=Coalesce(Subquery(pending, output_field=BigIntegerField()), 0)),
                   default=Coalesce(Subquery(bound, output_field=BigIntegerField()), 0),
                   output_field=BigIntegerField()))


def allocation_gpu_milli():
    """Thousandths of a GPU-equivalent an Allocation row holds: its gpu_milli for a share (a fraction or a
    bound GPU-memory share, as gpu_request.job_gpus counts them), 1000 for a whole GPU or a MIG instance."""
    return Case(When(gpu_milli__gt=0, then=F("gpu_milli")), default=Value(1000), output_field=IntegerField())


def pending_queue_position():
    """A job's `position`, the one definition the jobs API and the queueing page's table and CSV read: its
    1-based place among the pending jobs of its queue in the order the last scheduling cycle considered them
    (Job.queue_position, written by the cycle: scheduling/store._update_pending); None for a job that is
    not pending and for one submitted since the last cycle. The overall order (Job.pending_position) is
    shown as `overall_position` where it is shown at all, never under the name `position`."""
    return Case(When(state=Job.State.PENDING, then=F("queue_position")), default=None, output_field=IntegerField())


def node_names(job: Job) -> list[str]:
    """Distinct node names of a job's tasks (prefetched by job_list), in first-seen order."""
    seen: dict[str, None] = {}
    for task in job.tasks.all():
        if task.node_id is not None:
            seen.setdefault(task.node.name, None)
    return list(seen)


def shape(job: Job) -> str:
    """'4 x 8' per role, joined: tasks x what one task asks for (gpu_request.role_per_task: whole GPUs, a
    share '0.25', GPU memory '40000MiB', MIG instances), e.g. '1 x 1, 2 x 0.25'."""
    return ", ".join(f"{r.tasks} x {role_per_task(r)}" for r in job.roles.all())


def job_detail(user, pk: int) -> Job | None:
    job = (
        visible_jobs(user)
        .select_related("team", "queue", "submitter")
        .prefetch_related(
            Prefetch("roles", queryset=JobRole.objects.order_by("id")),
            Prefetch("tasks", queryset=Task.objects.select_related("node", "role").order_by("role_id", "index")),
            Prefetch("allocations", queryset=Allocation.objects.select_related("gpu__node", "task__role")
                     .order_by("released_at", "gpu__node__name", "gpu__index")),
            "attempt_records",
        )
        .filter(pk=pk)
        .first()
    )
    return job


def job_events(job: Job, limit: int = 200) -> QuerySet[Event]:
    return Event.objects.filter(job=job).select_related("actor", "node").order_by("-time", "-id")[:limit]


# --- the cluster ------------------------------------------------------------------------------------

def latest_cycle() -> SchedulerCycle | None:
    return SchedulerCycle.objects.order_by("-number").first()


def cluster_clock() -> datetime | None:
    """The cluster clock of the latest scheduling cycle (simulated in the demo)."""
    return SchedulerCycle.objects.order_by("-number").values_list("clock", flat=True).first()


@contextmanager
def one_snapshot():
    """Run the reads inside in one database snapshot, so the numbers of one page or one API answer come
    from the same moment (a cycle committing in between cannot make a count shown twice disagree). On
    PostgreSQL: a REPEATABLE READ READ ONLY transaction when none is open (inside one, e.g. in tests, the
    reads share it already); elsewhere a plain transaction (SQLite reads in one transaction see one state)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            connection.cursor().execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def latest_cluster_sample() -> ClusterSample | None:
    return ClusterSample.objects.order_by("-time", "-id").first()


@dataclass
class TeamCounts:
    team: str
    pending: int = 0
    running: int = 0  # admitted + running + preempting
    finished: int = 0
    by_state: dict[str, int] = field(default_factory=dict)


def job_counts_by_team(team_ids: set[int] | None = None) -> list[TeamCounts]:
    """Pending / running / finished jobs per team (every team that has a queue or a job)."""
    qs = Job.objects.all() if team_ids is None else Job.objects.filter(team_id__in=team_ids)
    rows = qs.values("team__name", "state").annotate(n=Count("id")).order_by()
    teams_qs = Team.objects.all() if team_ids is None else Team.objects.filter(id__in=team_ids)
    out: dict[str, TeamCounts] = {name: TeamCounts(name) for name in teams_qs.values_list("name", flat=True)}
    for row in rows:
        tc = out.setdefault(row["team__name"], TeamCounts(row["team__name"]))
        tc.by_state[row["state"]] = row["n"]
        if row["state"] == Job.State.PENDING:
            tc.pending += row["n"]
        elif row["state"] in Job.LIVE_STATES:
            tc.running += row["n"]
        elif row["state"] in Job.FINAL_STATES:
            tc.finished += row["n"]
    return sorted(out.values(), key=lambda t: (-(t.pending + t.running), t.team))


@dataclass
class QueueUsage:
    queue: str
    team: str | None
    used: int | float            # GPU-equivalents (a 0.25 share counts 0.25)
    guarantee: int
    quota: int
    limit: int | None
    pending_demand: int | float  # GPU-equivalents
    pending_jobs: int
    running_jobs: int

    @property
    def share_of_quota(self) -> float | None:
        return self.used / self.quota if self.quota else None


def queue_gpu_milli() -> tuple[dict[int, int], dict[int, int]]:
    """({queue id: thousandths of a GPU-equivalent its live allocations hold}, {queue id: thousandths its
    pending jobs ask for}), each queue's own jobs (not its subtree). One query each; the cluster page, the
    API's queue usage and the per-cycle QueueSamples (hence /metrics) all read these."""
    used = dict(
        Allocation.objects.filter(released_at__isnull=True).values("job__queue_id")
        .annotate(n=Sum(allocation_gpu_milli())).order_by().values_list("job__queue_id", "n")
    )
    demand = dict(
        JobRole.objects.filter(job__state=Job.State.PENDING).values("job__queue_id")
        .annotate(n=Sum(role_gpu_milli(gpu_memory=shared_gpu_memory()))).order_by().values_list("job__queue_id", "n")
    )
    return used, demand


def shared_apart() -> dict:
    """What the allocation rate leaves out and the queues' `used` counts (docs/concepts.md, Metrics): the live
    allocations on GPUs in mode shared or mig, which are neither schedulable nor free. {"gpus": GPUs holding one,
    "jobs": jobs holding them, "gpu_equivalents": their GPU-equivalents (as queue_gpu_milli counts them)}. One
    query; the cluster page's allocation card says it (new-user trial 22, G9)."""
    row = Allocation.objects.filter(released_at__isnull=True, gpu__sharing__in=(Gpu.Sharing.SHARED, Gpu.Sharing.MIG)
                                    ).aggregate(gpus=Count("gpu_id", distinct=True), jobs=Count("job_id", distinct=True),
                                                milli=Sum(allocation_gpu_milli()))
    return {"gpus": row["gpus"], "jobs": row["jobs"], "gpu_equivalents": from_milli(row["milli"] or 0)}


def queue_job_counts(subtree: bool = False) -> dict[int, tuple[int, int]]:
    """{queue id: (pending jobs, live jobs: admitted / running / preempting ...)}: each queue's own jobs, or with
    `subtree` its whole subtree's (an inner queue counts every job below it; every queue present, 0s included). The
    one count of the queues page (queue_usage) and of /metrics' pending_jobs / running_jobs (trial 21, F10: an inner
    queue showed 0/0 there while the page showed its children's jobs)."""
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for qid, state, n in (Job.objects.filter(state__in=(Job.State.PENDING, *Job.LIVE_STATES))
                          .values("queue_id", "state").annotate(n=Count("id")).order_by()
                          .values_list("queue_id", "state", "n")):
        counts[qid][state] = n
    own = {qid: (c.get(Job.State.PENDING, 0), sum(c.get(s, 0) for s in Job.LIVE_STATES)) for qid, c in counts.items()}
    if not subtree:
        return own
    return {qid: tuple(v) for qid, v in queue_tree().rollup(own, 2).items()}


def queue_usage(team_ids: set[int] | None = None) -> list[QueueUsage]:
    """Live per-queue usage (GPU-equivalents allocated now: queue_gpu_milli) against quota, summed over GPU flavors; an inner
    queue's used, demand and job counts are those of its whole subtree. Team queues first, then inner
    (platform) queues.

    Computed from the live allocations and quotas, so it is right even before the first sample.
    """
    queues = Queue.objects.select_related("team").order_by("name")
    if team_ids is not None:
        queues = queues.filter(team_id__in=team_ids)
    used, demand = queue_gpu_milli()
    quotas = queue_quotas()
    own = {qid: (used.get(qid, 0), demand.get(qid) or 0, *pr) for qid, pr in queue_job_counts().items()}
    for qid, n in used.items():
        own.setdefault(qid, (n, demand.get(qid) or 0, 0, 0))
    totals = queue_tree().rollup(own, 4)  # used, demand (thousandths), pending, running of each queue's subtree
    out = []
    for q in queues:
        quota = quotas.get(q.id, NO_QUOTA)
        u, d, p, r = totals.get(q.id, [0, 0, 0, 0])
        out.append(QueueUsage(queue=q.name, team=q.team.name if q.team else None, used=from_milli(u),
                              guarantee=quota.guarantee, quota=quota.quota, limit=quota.limit,
                              pending_demand=from_milli(d), pending_jobs=p, running_jobs=r))
    out.sort(key=lambda x: (x.team is None, x.queue))
    return out


# --- trees and quotas -------------------------------------------------------------------------------

def domain_tree(rows=None) -> Tree:
    """The domain tree over (id, name, tier, parent_id) rows; default: every domain, children by name."""
    if rows is None:
        rows = Domain.objects.order_by("name").values_list("id", "name", "tier", "parent_id")
    return Tree(rows, key=itemgetter(0), parent=itemgetter(3))


def cluster_tiers() -> set[int]:
    """The tiers of this cluster as the engine sees them (scheduler.core.domain_tree.build_tree): the domains'
    tiers, tier 1 when a node has no domain (it is a tier-1 domain of its own, "node:<name>"), and the tier of
    the synthetic root ("cluster", one above the top) when the domains do not form one tree over every node.
    A cluster with no domains at all (the local mode) is tiers {1, 2}. The tiers a job may name (submission,
    the what-if, the reschedule check) and the submit form's tier choices read them, so they are the tiers the
    placement, the largest runnable job and the topology map show (new-user trial 23: "tiers: none" in local
    mode while every job was placed at "cluster (tier 2)")."""
    from scheduler.core import DomainInfo, NodeInfo, Snapshot, TopologyError
    from scheduler.core.domain_tree import build_tree

    domains = tuple(DomainInfo(n, t, p) for n, t, p in Domain.objects.values_list("name", "tier", "parent__name"))
    one_per_domain: dict = {}  # the tiers depend on which domains hold nodes, not on how many
    for name, domain in Node.objects.order_by("name").values_list("name", "domain__name"):
        one_per_domain.setdefault(domain, name)
    nodes = tuple(NodeInfo(name=name, flavor="", gpus=0, domain=domain) for domain, name in one_per_domain.items())
    if not nodes:
        return {d.tier for d in domains}
    try:
        return set(build_tree(Snapshot(nodes=nodes, domains=domains)).tier_levels)
    except TopologyError:  # a broken tree: the cycle reports it; the domains' own tiers meanwhile
        return {d.tier for d in domains}


def queue_tree(queues=None) -> Tree:
    """The queue tree over `queues` (Queue objects, e.g. the ones a user sees); default: every queue as a
    dict (id, name, parent_id, team_name, weight, state, recent_usage: decayed GPUs per flavor), children by
    name."""
    if queues is None:
        rows = Queue.objects.order_by("name").values("id", "name", "parent_id", "weight", "state", "recent_usage",
                                                      team_name=F("team__name"))
        return Tree(rows, key=itemgetter("id"), parent=itemgetter("parent_id"))
    return Tree(queues, key=attrgetter("pk"), parent=attrgetter("parent_id"))


@dataclass(frozen=True)
class QuotaTotals:
    """A queue's own quota summed over GPU flavors, in GPUs. `limit` is the cap the scheduler enforces, as a
    total: the sum over the GPU flavors the cluster's nodes have of the queue's own limit for that flavor.
    It is None (no cap of its own) when one of those flavors has no limit: a null limit, or no quota row
    for it (the engine caps a flavor only where a row gives a limit, plugins/quota.QueueTree.static_limit).
    A flavor no node has adds nothing (no GPU of it can be held), whatever its limit; neither does a MIG
    resource "<flavor>/mig-<profile>" (counted in instances, its GPUs are its model's). While the cluster
    has no nodes yet, the quota rows' flavors stand for the cluster's."""

    guarantee: int = 0
    quota: int = 0
    limit: int | None = None


NO_QUOTA = QuotaTotals()


def queue_quotas() -> dict[int, QuotaTotals]:
    """{queue id: QuotaTotals} of every queue with a quota row; a queue without one has NO_QUOTA. The one
    place a queue's total guarantee / quota / limit is computed: the API's queue usage, the Cluster page,
    the queues CSV, /metrics and the watermark samples all read it."""
    rows = list(Quota.objects.values_list("queue_id", "flavor", "guarantee", "quota", "limit"))
    flavors = set(Node.objects.values_list("flavor", flat=True).distinct()) or \
        {f for _, f, *_ in rows if "/mig-" not in f}
    sums: dict[int, list] = defaultdict(lambda: [0, 0])  # guarantee, quota
    limits: dict[int, dict[str, int | None]] = defaultdict(dict)
    for qid, flavor, g, q, lim in rows:
        sums[qid][0] += g
        sums[qid][1] += q
        if flavor in flavors:
            limits[qid][flavor] = lim
    out = {}
    for qid, (g, q) in sums.items():
        own = limits[qid]
        capped = bool(flavors) and all(own.get(f) is not None for f in flavors)
        out[qid] = QuotaTotals(g, q, sum(own[f] for f in flavors) if capped else None)
    return out


def cluster_series(limit: int = 600) -> list[dict]:
    """The latest `limit` cluster samples, oldest first, as dicts (time, rates, counts)."""
    rows = list(
        ClusterSample.objects.order_by("-time", "-id").values(
            "time", "allocation_rate", "fragmentation_rate", "free_gpus", "allocated_gpus",
            "schedulable_gpus", "pending_jobs", "running_jobs", "domain_completeness",
        )[:limit]
    )
    rows.reverse()
    return rows


def queue_series(since: datetime | None = None, team_ids: set[int] | None = None) -> list[dict]:
    """Team (leaf) queue samples (time, queue name, used, quota, pending demand) since a time, oldest
    first. Inner queues' samples are sums of their subtree, so they are left out (no double counting)."""
    qs = QueueSample.objects.filter(queue__team__isnull=False)
    if since is not None:
        qs = qs.filter(time__gte=since)
    if team_ids is not None:
        qs = qs.filter(queue__team_id__in=team_ids)
    rows = list(qs.order_by("time", "queue__name").values("time", "queue__name", "used", "quota", "pending_demand"))
    for r in rows:  # GPU-equivalents (float columns) as shown: 105, 103.5
        r["used"], r["pending_demand"] = as_gpus(r["used"]), as_gpus(r["pending_demand"])
    return rows
