"""The database side of the forecast (issue #15): live snapshot -> scheduler.forecast -> Job rows.

- `build_estimator()`: scheduler.forecast.RuntimeEstimator fed with the run times of the latest
  FORECAST_HISTORY finished jobs (succeeded or failed; started_at -> finished_at), keyed by submitter
  (the team for trace jobs without one), queue and GPU count.
- `estimate_fn(snapshot, estimator)`: (median, p90) total run time per JobInfo (time limit when declared,
  else the estimator), and each job's estimator source.
- `run_forecast_once(clock=)`: single-flight on its own lock (never the cycle's: a forecast never delays a
  cycle, nor waits for one), reads the snapshot the cycle would read, runs `forecast_start` (median and P90
  passes, horizon FORECAST_HORIZON_SECONDS, at most FORECAST_MAX_CYCLES engine cycles) and writes
  estimated_start / estimated_start_p90 / estimate_note / estimated_at of every job still pending (a
  compare-and-set on the state). Returns a summary dict, or None when another forecast runs.
- `forecast_due(clock)`: whether FORECAST_SECONDS have passed since the last forecast (the latest
  `estimated_at` of a pending job); the Celery task checks it, as several workers may each ask for one.
"""
from __future__ import annotations

import logging
import time as _time
from collections import defaultdict
from datetime import datetime, timedelta, timezone as dt_tz

from django.conf import settings
from django.db.models import Max

from gpuplatform.bulk import update_rows
from gpuplatform.models import Job, JobRole, Queue
from gpuplatform.scheduling import usage_decay
from gpuplatform.scheduling.locks import single_flight
from gpuplatform.wording import NO_HISTORY
from scheduler.forecast import RuntimeEstimator, forecast_start

log = logging.getLogger("gpuplatform.scheduling.forecast")
INFO_EVERY_SECONDS = 60.0  # the forecast's summary line at INFO at most this often (wall seconds)
_last_info = [-INFO_EVERY_SECONDS]  # time.monotonic() of the last one
FORECAST_LOCK_KEY = 0x6770_7566_6363  # "gpufcc": the forecast's own advisory lock
SOURCES = {"time_limit": "its time limit", "user_shape": "the submitter's recent jobs of this size",
           "queue": "the queue's recent jobs", "cluster": "the cluster's recent jobs",
           "default": f"{NO_HISTORY} (1 h assumed)"}  # wording.basis_words reads it: "run time assumed: no history"


def setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def _gpus_by_job(job_ids) -> dict[int, int]:
    gpus: dict[int, int] = defaultdict(int)
    ids = list(job_ids)
    for i in range(0, len(ids), 2000):
        for job_id, tasks, per in JobRole.objects.filter(job_id__in=ids[i:i + 2000]).values_list(
                "job_id", "tasks", "gpus_per_task"):
            gpus[job_id] += tasks * per
    return gpus


def user_key(submitter_id, team_id) -> str:
    return f"user:{submitter_id}" if submitter_id is not None else f"team:{team_id}"


def build_estimator(limit: int | None = None) -> RuntimeEstimator:
    """The estimator over the latest `limit` (FORECAST_HISTORY) finished jobs, oldest first."""
    limit = int(limit or setting("FORECAST_HISTORY", 5000))
    rows = list(Job.objects.filter(state__in=("succeeded", "failed"), started_at__isnull=False,
                                   finished_at__isnull=False)
                .order_by("-finished_at")[:limit]
                .values_list("id", "submitter_id", "team_id", "queue__name", "started_at", "finished_at"))
    gpus = _gpus_by_job(r[0] for r in rows)
    est = RuntimeEstimator(default_seconds=setting("FORECAST_DEFAULT_RUNTIME_SECONDS", 3600))
    est.observe_many((user_key(sub, team), queue, gpus.get(jid, 0), (end - start).total_seconds())
                     for jid, sub, team, queue, start, end in reversed(rows))
    return est


def estimate_fn(snapshot, estimator: RuntimeEstimator):
    """(estimate(job, elapsed) -> (median, p90), sources {job id: Estimate of its own run time})."""
    ids = [j.id for j in snapshot.jobs if isinstance(j.id, int)]
    owner = {}
    for i in range(0, len(ids), 2000):
        owner.update((jid, user_key(sub, team)) for jid, sub, team in
                     Job.objects.filter(pk__in=ids[i:i + 2000]).values_list("id", "submitter_id", "team_id"))
    sources = {}

    def estimate(job, elapsed):
        e = estimator.estimate(owner.get(job.id, job.queue), job.queue, job.gpus_requested, elapsed=elapsed,
                               time_limit=job.time_limit)
        if job.state == "pending" and elapsed == 0.0:
            sources[job.id] = e
        return e.median, e.p90

    return estimate, sources


def _dt(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, tz=dt_tz.utc) if seconds is not None else None


def pending_note() -> str:
    """What a pending job the forecast has not seen yet carries instead of an estimate (submitted, or requeued by a
    drain, an eviction or a fault, since the last forecast: its estimated_start is null and its estimate_note
    empty): when one comes. New-user trial 22, G10: a drain's requeued jobs showed a null start and an empty note
    for up to a minute, while every pending job is said to have an estimate or "no estimate" with a reason."""
    every = setting("FORECAST_SECONDS", 60)
    if every <= 0:
        return "no estimate: the forecast is off (FORECAST_SECONDS = 0)"
    return f"estimate pending: the next forecast, within {every:g} s, gives one"


# the estimate_note of a pending job whose estimate is its scheduling cycle's reservation (shown_estimate)
RESERVED_NOTE = ("reserved by the last scheduling cycle: GPUs are held for it, free by then at the latest (the running "
                 "jobs' time limits)")


def shown_estimate(job) -> dict:
    """The one start estimate of a job (a Job, or a values() row with its `state` or pending only), as the API and
    every page show it: {estimated_start, estimated_start_p90, estimate_note, estimated_at}. A pending job the last
    scheduling cycle reserved GPUs for has that reservation's start (Job.reservation_start, the time its reason
    names: "reserved, estimated start ..."), newer and specific (it counts from the running jobs' time limits, so no
    later 90 % bound), over the forecast's; the forecast's is shown only without one. New-user trial 26, F6: gpuctl's
    line read "starts in about 45 s; ...; reserved, estimated start <12 s later>", and "estimate pending: ..." next
    to the reservation's start. A pending job with neither carries pending_note()."""
    get = job.get if isinstance(job, dict) else (lambda name, default=None: getattr(job, name, default))
    shown = {"estimated_start": get("estimated_start"), "estimated_start_p90": get("estimated_start_p90"),
             "estimate_note": get("estimate_note") or "", "estimated_at": get("estimated_at")}
    if get("state", Job.State.PENDING) != Job.State.PENDING:
        return shown
    reservation = get("reservation_start")
    if reservation is not None:
        shown.update(estimated_start=reservation, estimated_start_p90=reservation, estimate_note=RESERVED_NOTE)
    elif shown["estimated_start"] is None and not shown["estimate_note"]:
        shown["estimate_note"] = pending_note()
    return shown


def forecast_due(clock: datetime) -> bool:
    last = Job.objects.filter(state="pending").aggregate(t=Max("estimated_at"))["t"]
    return last is None or clock - last >= timedelta(seconds=setting("FORECAST_SECONDS", 60))


def _engine_kwargs() -> dict:
    """The forecast's horizon, cycle cap and engine config from the settings (forecast and what-if), and each
    queue's grace period (Queue.preemption_grace_seconds: how long a job the forecast evicts keeps its GPUs)."""
    return {"horizon": setting("FORECAST_HORIZON_SECONDS", 7 * 86400),
            "max_cycles": int(setting("FORECAST_MAX_CYCLES", 400)), "config": usage_decay.default_config(),
            "queue_grace": {name: float(grace) for name, grace in
                            Queue.objects.values_list("name", "preemption_grace_seconds")}}


def run_snapshot_forecast(snapshot, estimator: RuntimeEstimator | None = None, **kwargs):
    """forecast_start on `snapshot` with the platform's estimator and settings. Returns (starts, info,
    sources) as scheduler.forecast.forecast_start plus each pending job's run-time Estimate."""
    estimator = estimator or build_estimator()
    estimate, sources = estimate_fn(snapshot, estimator)
    starts, info = forecast_start(snapshot, estimate, **{**_engine_kwargs(), **kwargs})
    for job in snapshot.jobs:  # a job that never ran in the forecast still gets its own estimate's source
        if job.state == "pending" and job.id not in sources:
            estimate(job, 0.0)
    return starts, info, sources


def run_forecast_once(*, clock: datetime | None = None) -> dict | None:
    """One single-flight forecast at cluster time `clock` (default: the cluster clock). Writes every
    pending job's estimate; returns {"jobs", "estimated", "no_estimate", "cycles", "wall_s"} or None."""
    from gpuplatform import clock as cluster_clock
    from gpuplatform.scheduling.store import build_snapshot

    clock = clock or cluster_clock.now()
    with single_flight(FORECAST_LOCK_KEY) as acquired:
        if not acquired:
            log.info("forecast skipped: another forecast is running")
            return None
        t0 = _time.perf_counter()
        snapshot, _ = build_snapshot(clock.timestamp())
        starts, info, sources = run_snapshot_forecast(snapshot)
        rows = []
        for job in snapshot.jobs:
            if job.state != "pending" or not isinstance(job.id, int):
                continue
            f = starts.get(job.id)
            if f is None or f.start is None:
                note = (f.reason if f is not None else "no estimate")[:300]
                rows.append((job.id, None, None, note, clock))
                continue
            src = sources.get(job.id)
            note = f"run time from {SOURCES.get(src.source, src.source)}" if src is not None else ""
            if src is not None and src.samples:
                note += f" ({src.samples} jobs)"
            rows.append((job.id, _dt(f.start), _dt(f.start_p90), note[:300], clock))
        update_rows(Job, rows, ["estimated_start", "estimated_start_p90", "estimate_note", "estimated_at"], {},
                    where={"state": "pending"})
        wall = _time.perf_counter() - t0
    summary = {"jobs": len(rows), "estimated": sum(1 for r in rows if r[1] is not None),
               "no_estimate": sum(1 for r in rows if r[1] is None), "cycles": info["cycles"] + info["cycles_p90"],
               "wall_s": round(wall, 3)}
    # at INFO once a minute at most (the demo's forecast follows its 600x clock: several a second), else DEBUG
    now = _time.monotonic()
    if now - _last_info[0] >= INFO_EVERY_SECONDS:
        _last_info[0] = now
        log.info("forecast: %s", summary)
    else:
        log.debug("forecast: %s", summary)
    return summary


# --- what-if (POST /api/v1/forecast/) -------------------------------------------------------------------

ADMIN_KINDS = ("set_quota", "set_weight", "drain_nodes", "add_nodes")
JOB_KINDS = ("set_priority", "cancel")


class WhatIfDenied(Exception):
    """A change the user may not ask about: `index`, and why."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index, self.message = index, message


def check_what_if_access(user, changes: list[dict]) -> None:
    """Team members may ask about their own teams' jobs (priority, cancel) and hypothetical submissions to
    their teams' queues; quotas, limits, weights and nodes are for platform admins. Raises WhatIfDenied.
    A job change naming a job the user cannot see, none such or another team's (unknown and invisible read the same,
    as the jobs API's 404), is refused as the engine's what-if refuses an unknown job for an admin ("no pending or
    running job 123456", WhatIfError: a 400 on changes[i].job; new-user trial 24, F5: a member was told 403 "your own
    teams' jobs only" for a job that does not exist); a job of a team the user only views is the 403."""
    from gpuplatform import access
    from gpuplatform.models import Queue
    from scheduler.forecast.whatif import WhatIfError

    admin = access.is_platform_admin(user)
    for i, ch in enumerate(changes):
        kind = ch.get("kind")
        if kind in ADMIN_KINDS and not admin:
            raise WhatIfDenied(i, f"{kind} is for platform admins")
        if kind in JOB_KINDS and not admin:
            team = access.visible_jobs(user).filter(pk=ch.get("job")).values_list("team_id", flat=True).first()
            if team is None:
                raise WhatIfError(i, "job", f"no pending or running job {ch.get('job')!r}")
            if not access.can_submit(user, team):
                raise WhatIfDenied(i, "you may ask about your own teams' jobs only")
        if kind == "submit" and not admin:
            team = Queue.objects.filter(name=ch.get("queue")).values_list("team_id", flat=True).first()
            if team is None or not access.can_submit(user, team):
                raise WhatIfDenied(i, "you may submit (hypothetically too) to your own teams' queues only")


def check_submit_changes(user, changes: list[dict]) -> None:
    """Each `submit` change must be a job submission would take, by submission's own rules: the queue exists
    and takes new jobs (job_rules.submit_queue_error: open, a leaf, the team's), the priority is the
    asker's to give (services.jobs.check_submit_priority), topology_mode / highest_tier (a tier this cluster
    has) and time_limit (1 s .. 366 days) by job_rules.check_placement_and_limit, and `id` must not be a real job's
    id (new-user trial 11, F5); the roles are checked by submit_roles. A what-if
    never forecasts a job POST /api/v1/jobs/ refuses (new-user trial 10, F3: root, inner and closing queues
    were forecast). Raises scheduler.forecast.whatif.WhatIfError(index, field, the rule)."""
    from scheduler.forecast.whatif import WhatIfError

    from ..errors import ValidationError
    from ..job_rules import submit_queue_error
    from ..lifecycle import closed_ancestor
    from ..models import Queue
    from ..services.jobs import check_submit_priority

    from ..job_rules import check_placement_and_limit, resolve_tier
    from .. import queries
    tiers = None
    for i, ch in enumerate(changes):
        if ch.get("kind") != "submit":
            continue
        queue = Queue.objects.select_related("team").filter(name=ch.get("queue")).first()
        if queue is None:
            raise WhatIfError(i, "queue", f"unknown queue {str(ch.get('queue'))[:60]!r}")
        why = submit_queue_error(queue, has_children=Queue.objects.filter(parent=queue).exists(), team=queue.team,
                                 closed_ancestor=closed_ancestor(queue.pk))
        if why:
            raise WhatIfError(i, "queue", why)
        if queue.team is not None:
            try:
                check_submit_priority(user, queue.team, ch.get("priority", 0))
            except ValidationError as exc:
                raise WhatIfError(i, "priority", exc.errors["priority"]) from None
        if tiers is None:
            tiers = queries.cluster_tiers()
        tier, errors = resolve_tier(ch.get("highest_tier"), "highest_tier")  # a name ("leaf") as on submission
        if errors:
            raise WhatIfError(i, "highest_tier", errors["highest_tier"])
        if tier is not None:
            ch["highest_tier"] = tier  # the number, as the engine's what-if reads it
        errors = check_placement_and_limit(topology_mode=ch.get("topology_mode") or "none",
                                           highest_tier=tier, preferred_tier=None,
                                           time_limit_seconds=ch.get("time_limit"), tiers=tiers,
                                           time_limit_field="time_limit")
        if errors:
            field, message = next(iter(errors.items()))
            raise WhatIfError(i, field, message)
        jid = ch.get("id")
        if jid is not None:  # the hypothetical job's label in the answer: not a real job's id
            if jid.isascii() and jid.isdigit() and len(jid) <= 18 and Job.objects.filter(pk=int(jid)).exists():
                raise WhatIfError(i, "id", f"{jid!r} is already a real job's id; give the hypothetical job "
                                           f"another one")


# a never-fit code (fit_check.never_fits_reason) -> the field of a submit change (one role of its own fields) at fault
NEVER_FITS_FIELDS = {"never_fits_flavor": "flavors", "never_fits_node": "gpus_per_task",
                     "never_fits_numa": "gpus_per_task", "never_fits_cpu": "cpu_milli",
                     "never_fits_memory": "memory_mib", "never_fits_tier": "highest_tier", "never_fits_mig": "mig_count"}


def _never_fits_field(code: str, change: dict) -> str:
    """The field of a submit change (without "roles") a never-fit refusal of `code` is filed under: the one the
    change can alter to fit (new-user trial 14, F13: every refusal was filed under "roles", a field a what-if
    change does not have). Too many GPUs in one domain: min_available when given, else tasks; a GPU share
    no GPU takes: the share field the change gave."""
    if code in NEVER_FITS_FIELDS:
        return NEVER_FITS_FIELDS[code]
    if code == "never_fits_shared":
        return next((f for f in ("gpu_fraction", "gpu_memory_mib") if change.get(f) is not None), "gpus_per_task")
    return "min_available" if change.get("min_available") is not None else "tasks"


def default_node_flavor() -> str:
    """The flavor of an add_nodes change that names none: the cluster's first GPU flavor by name ("gpu" on a
    cluster without nodes). One deterministic choice, given to the engine's what-if explicitly."""
    from ..models import Node

    return Node.objects.order_by("flavor").values_list("flavor", flat=True).first() or "gpu"


def check_add_nodes_changes(changes: list[dict]) -> None:
    """Each `add_nodes` change's flavor must follow the quota API's flavor rules: quota_rules.flavor_error (one GPU
    model named by the name rule; a MIG resource "<model>/mig-<profile>" is not a node's model: new-user trial 14,
    F13, "x y" was added as a flavor the quota API refuses), and quota_rules.flavor_case_error (not the cluster's
    flavor, another quota's, or an earlier add_nodes change's, spelt in other letter case: break-it trial 20, F8,
    `h200` nodes were forecast next to the cluster's `H200`, a flavor no job asking `H200` can use). A change
    without a flavor gets default_node_flavor(). Raises scheduler.forecast.whatif.WhatIfError(index, "flavor",
    the rule)."""
    from scheduler.forecast.whatif import WhatIfError

    from ..names import NAME_HELP
    from ..quota_rules import flavor_case_error, flavor_error

    default = None
    added: list[str] = []
    for i, ch in enumerate(changes):
        if ch.get("kind") != "add_nodes":
            continue
        flavor = ch.get("flavor")
        if flavor is None:
            default = default or default_node_flavor()
            ch["flavor"] = default
            added.append(default)
            continue
        why = flavor_error(flavor)
        if why is None and "/mig-" in flavor:
            why = (f"a node's flavor is a GPU model that uses {NAME_HELP} (e.g. H200); {flavor[:40]!r} is a MIG "
                   f"resource, not a GPU model")
        why = why or flavor_case_error(flavor, also=added)
        if why:
            raise WhatIfError(i, "flavor", why)
        added.append(flavor)


def added_nodes(changes: list[dict]) -> tuple:
    """NodeInfo of the nodes the what-if's add_nodes changes add (the engine's what-if builds the same:
    scheduler.forecast.whatif.apply_changes), for the submit changes' never-fit check."""
    from scheduler.core import NodeInfo

    return tuple(NodeInfo(name=f"whatif-node-{i + 1}-{k + 1}", flavor=str(ch.get("flavor") or default_node_flavor()),
                          gpus=int(ch["gpus"]), domain=ch.get("domain"))
                 for i, ch in enumerate(changes) if ch.get("kind") == "add_nodes"
                 for k in range(int(ch["count"])))


# a submit change's fields that describe its one role (a change without "roles"), as job submission names them
SUBMIT_ROLE_FIELDS = ("tasks", "gpus_per_task", "min_available", "cpu_milli", "memory_mib", "gpu_fraction",
                      "gpu_memory_mib", "mig_profile", "mig_count")


def submit_roles(changes: list[dict]) -> list[dict]:
    """The changes with each `submit` change's roles checked and normalised by job submission's own rules
    (job_rules.check_roles: tasks, whole GPUs or one sharing kind, gpu_fraction -> gpu_milli, MIG count,
    min_available) and its `interruptible` rule (services.jobs.check_interruptible), as the engine's what-if
    reads them. A change without "roles" is one role of its own fields. Raises
    scheduler.forecast.whatif.WhatIfError(index, field, message) naming the field as the change named it
    ("gpu_fraction", or "roles[1].gpu_fraction" for a change with roles)."""
    from scheduler.forecast.whatif import WhatIfError

    from .. import fit_check
    from ..errors import ValidationError
    from ..job_rules import check_roles
    from ..services.jobs import check_interruptible

    extra = added_nodes(changes)
    out = []
    for i, ch in enumerate(changes):
        if ch.get("kind") != "submit":
            out.append(ch)
            continue
        given = ch.get("roles")
        raw = given if given else [{k: ch[k] for k in SUBMIT_ROLE_FIELDS if ch.get(k) is not None}]
        flavors = [list(r.get("flavors") or ()) if given else list(ch.get("flavors") or ()) for r in raw]
        roles, errors = check_roles([{k: v for k, v in r.items() if k != "flavors"} for r in raw])
        if errors:
            field, message = next(iter(errors.items()))
            raise WhatIfError(i, field if given else field.removeprefix("roles[0]."), message)
        try:
            check_interruptible(ch.get("interruptible", False), ch.get("preemptible", True))
        except ValidationError as exc:
            raise WhatIfError(i, "interruptible", exc.errors["interruptible"]) from None
        # A job submission refuses as never fitting this cluster (16 GPUs per task on 8-GPU nodes) is a 400,
        # as POST /api/v1/jobs/ answers, through the same check (fit_check), not an answer that it "can never
        # start" (docs/forecast.md; new-user trial 7, F5). The cluster is the one the what-if's add_nodes changes
        # build (new-user trial 14, F4), and the error names the change's own field (F13: it said "roles").
        # A change with roles is keyed as job submission keys it, by the role field at fault
        # (fit_check.refusal_errors: "roles[1].gpus_per_task"; "roles" only for the roles together), its
        # flavors under the change's own name for them ("roles[0].flavors").
        placed = [{**r, "flavor": "|".join(f)} if f else r for r, f in zip(roles, flavors)]
        where = dict(topology_mode=ch.get("topology_mode") or "none", highest_tier=ch.get("highest_tier"),
                     extra_nodes=extra)
        if given:
            errors = fit_check.refusal_errors(placed, given=raw, **where)
            if errors:
                field, message = next(iter(errors.items()))
                raise WhatIfError(i, field + "s" if field.endswith("].flavor") else field, message)
        else:
            why = fit_check.refusal_reason(placed, **where)
            if why:
                code, message = why
                raise WhatIfError(i, _never_fits_field(code, ch), message)
        specs = [{"name": r["name"], "tasks": r["tasks"], "gpus_per_task": r["gpus_per_task"],
                  "min_available": r["min_available"], "flavors": f, "cpu_milli": r["cpu_milli"],
                  "memory_mib": r["memory_mib"], "gpu_milli": r["gpu_milli"], "gpu_memory_mib": r["gpu_memory_mib"],
                  "mig_profile": r["mig_profile"]} for r, f in zip(roles, flavors)]
        out.append({**{k: v for k, v in ch.items() if k not in SUBMIT_ROLE_FIELDS}, "roles": specs})
    return out


def check_quota_changes(changes: list[dict]) -> None:
    """Each `set_quota` change must be a quota the quota admin could save: the quota service's rules
    (quota_rules.flavor_case_error, then quota_rules.check_quota: flavor, guarantee <= quota <= limit, the children's sum within the parent's
    quota, the root queues' within the cluster). Fields a change leaves out keep the queue's current values
    (0 / 0 / no limit without a row). The changes are checked in order, each against the tree as the earlier
    ones leave it: they are applied in a transaction that is always rolled back (nothing is written). The
    cluster is the one the what-if's add_nodes changes build (their nodes are added in that transaction too:
    a quota for the added flavor or GPUs is one the admin could save once they join; new-user trial 14, F4). A
    change naming an unknown queue is left to the engine's what-if (its "no queue" error). Raises
    scheduler.forecast.whatif.WhatIfError(index, field, the rule)."""
    import uuid

    from django.db import transaction

    from scheduler.forecast.whatif import WhatIfError

    from .. import quota_rules
    from ..models import Domain, Node, Queue, Quota

    if not any(ch.get("kind") == "set_quota" for ch in changes):
        return

    with transaction.atomic():
        tag = uuid.uuid4().hex[:12]
        domains = dict(Domain.objects.values_list("name", "id"))
        Node.objects.bulk_create([Node(name=f"whatif-{tag}-{n.name}", flavor=n.flavor, gpu_count=n.gpus,
                                       domain_id=domains.get(n.domain), state=Node.State.READY)
                                  for n in added_nodes(changes)])
        for i, ch in enumerate(changes):
            if ch.get("kind") != "set_quota":
                continue
            queue = Queue.objects.filter(name=ch.get("queue")).first()
            if queue is None:
                continue
            flavor = ch["flavor"]
            case = quota_rules.flavor_case_error(flavor, queue)  # as services.set_quota checks it first
            if case:
                raise WhatIfError(i, "flavor", case)
            current = Quota.objects.filter(queue=queue, flavor=flavor).values_list(
                "guarantee", "quota", "limit").first() or (0, 0, None)
            given = {k for k in ("guarantee", "quota", "limit") if k in ch}
            g, q, lim = (ch[k] if k in ch else v for k, v in zip(("guarantee", "quota", "limit"), current))
            errors = quota_rules.check_quota(queue, flavor, g, q, lim, given)
            if errors:
                field, message = next(iter(errors.items()))
                raise WhatIfError(i, field, message)
            Quota.objects.update_or_create(queue=queue, flavor=flavor,
                                           defaults={"guarantee": g, "quota": q, "limit": lim})
        transaction.set_rollback(True)  # checked, not saved


def what_if_live(user, changes: list[dict], *, clock: datetime | None = None) -> dict:
    """The what-if on the live cluster at cluster time `clock`: permissions (check_what_if_access), the submit
    changes' queue and priority by submission's rules (check_submit_changes), the quota
    changes checked by the quota service's rules (check_quota_changes), the snapshot the cycle would read,
    scheduler.forecast.whatif.what_if with the platform's estimator. Nothing is kept: the quota check's writes
    are rolled back. Returns the API's answer (api/views/forecast.py documents it). Raises
    WhatIfDenied, scheduler.forecast.whatif.WhatIfError."""
    from gpuplatform import access, clock as cluster_clock
    from gpuplatform.models import Job as JobModel
    from gpuplatform.scheduling.store import build_snapshot
    from scheduler.forecast.whatif import describe, describe_eviction, from_now, submit_ids, what_if

    check_what_if_access(user, changes)
    check_submit_changes(user, changes)
    check_add_nodes_changes(changes)
    check_quota_changes(changes)
    changes = submit_roles(changes)
    clock = clock or cluster_clock.now()
    snapshot, _ = build_snapshot(clock.timestamp())
    estimate, _sources = estimate_fn(snapshot, build_estimator())
    out = what_if(snapshot, changes, estimate, **_engine_kwargs())
    visible = access.visible_team_ids(user)
    # every job the answer may name: the forecast's, the evictions' victims and beneficiaries, the explanations'
    named = set(out.before) | set(out.after) | {w.job for w in out.why.values()} | {
        w.beneficiary for w in out.why.values()} | {w.via for w in out.why.values()}
    for _, victim, _, ben in [*out.evictions, *out.avoided]:
        named |= {victim, ben}
    named |= {v for e in out.eviction_why for v in e.instead}
    ids = [j for j in named if isinstance(j, int)]
    rows = {r[0]: r for r in JobModel.objects.filter(pk__in=ids).values_list("id", "name", "team_id", "queue__name")}
    hyp_queue = {jid: changes[i].get("queue") for i, jid in submit_ids(changes).items()}

    def seen(jid) -> bool:
        """A job the caller may see (a hypothetical one, or one of its teams'; an admin sees all)."""
        return jid in out.hypothetical or visible is None or (rows.get(jid) is not None and rows[jid][2] in visible)

    def name(jid) -> str:
        """How the answer's words name a job: never another team's job's id or name (new-user trial 22, F3)."""
        if jid in out.hypothetical:
            return f"your job {jid!r}"
        if jid in rows:
            return f"job {jid} ({rows[jid][1]})" if seen(jid) else "a job of another team"
        return f"job {jid}" if visible is None else "a job of another team"

    def queue_of(jid) -> str | None:
        return hyp_queue.get(jid) if jid in out.hypothetical else rows[jid][3] if jid in rows else None

    def hours(t: float) -> str:  # "in 1 min", "in 2.5 h" (whatif.from_now)
        return from_now(t, out.now)

    def why_of(jid) -> dict | None:
        """Why a job's start moves (scheduler.forecast.whatif.explain), as the caller may see it."""
        w = out.why.get(jid)
        if w is None:
            return None
        return {"moved": w.moved, "cause": w.cause, "job": w.job if w.job is not None and seen(w.job) else None,
                "rule": w.rule, "beneficiary": w.beneficiary if w.beneficiary is not None and seen(w.beneficiary)
                else None, "at": _iso(w.at), "text": describe(w, name, hours)}

    def side(f) -> dict:
        if f is None:
            return {"estimated_start": None, "estimated_start_p90": None, "no_estimate": "not pending in this case"}
        return {"estimated_start": _iso(f.start), "estimated_start_p90": _iso(f.start_p90),
                "no_estimate": f.reason or None}

    jobs = []
    for jid in sorted(set(out.before) | set(out.after), key=str):
        hyp = jid in out.hypothetical
        if not hyp:
            row = rows.get(jid)
            if row is None or (visible is not None and row[2] not in visible):
                continue
        b, a = out.before.get(jid), out.after.get(jid)
        change = (a.start - b.start) if (a and b and a.start is not None and b.start is not None) else None
        jobs.append({"id": jid, "name": jid if hyp else rows[jid][1],
                     "queue": hyp_queue[jid] if hyp else rows[jid][3], "hypothetical": hyp,
                     "before": side(b), "after": side(a), "start_change_s": change, "why": why_of(jid)})

    def eviction(t, v, rule, ben, why=None) -> dict:
        """One eviction as the caller may see it: the victim's queue, whom it is for (a beneficiary of another team's
        is not named: null, as its job is hidden) and, for an eviction only the change makes, why."""
        ben_seen = ben is not None and seen(ben)
        out_ = {"job": v, "queue": queue_of(v), "rule": rule, "beneficiary": ben if ben_seen else None,
                "beneficiary_queue": queue_of(ben) if ben_seen else None, "at": _iso(t)}
        if why is not None:
            out_.update({"cause": "drain" if rule == "drain" else why.cause,
                         "instead": [i for i in why.instead if seen(i)],
                         "text": describe_eviction(v, rule, ben, why, name)})
        return out_

    whys = dict(zip(((e[1], e[2]) for e in out.evictions), out.eviction_why))
    evictions = [eviction(t, v, rule, ben, whys.get((v, rule))) for t, v, rule, ben in out.evictions if seen(v)]
    avoided = [eviction(t, v, rule, ben) for t, v, rule, ben in out.avoided if seen(v)]
    # evictions of other teams' jobs the changes' own submissions make: counted, never named
    hidden_for_change = sum(1 for _, v, _, ben in out.evictions if not seen(v) and ben in out.hypothetical)
    # Per queue: the queues the user sees (the queues API's rule, access.visible_queues); the others are
    # counted in hidden_queues, as hidden evictions are (new-user trial 21: a member saw every team's waits).
    shown = (None if visible is None
             else set(access.visible_queues(user).values_list("name", flat=True)))
    queues = [{"queue": q, **v} for q, v in out.queues.items() if shown is None or q in shown]
    return {"now": _iso(out.now), "jobs": jobs, "queues": queues, "hidden_queues": len(out.queues) - len(queues),
            "evictions": evictions, "hidden_evictions": len(out.evictions) - len(evictions),
            "hidden_evictions_for_change": hidden_for_change, "avoided_evictions": avoided,
            "hidden_avoided_evictions": len(out.avoided) - len(avoided),
            "cancelled": out.removed, "cost": out.info, "written": False}


def _iso(seconds: float | None) -> str | None:
    return _dt(seconds).isoformat() if seconds is not None else None
