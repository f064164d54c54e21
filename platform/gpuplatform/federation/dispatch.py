"""The manager's round (every FEDERATION_SYNC_SECONDS; `run_round`): sync members, move a lost member's
jobs, withdraw jobs that wait too long where a better cluster now exists, dispatch pending jobs.

The policy (which cluster) is scheduler.core.federation.choose; this module does the I/O and the writes.

At most one live copy of a job -- how each step keeps it (tests/federation prove each):
1. Dispatch is two writes around one request. Before the request the job is DISPATCHING with its cluster
   and generation committed; the create carries external_id "fed:<id>:g<gen>" and Idempotency-Key
   "fed-<id>-g<gen>". A manager that dies after the request and before the second write finds the job
   DISPATCHING on restart and re-sends the same create to the same cluster: the worker replays the first
   answer (same job id), so no second copy. A copy is only ever created under a generation that is
   current at the manager.
2. A move to another cluster happens only after the old copy is known not to run: a withdrawal the worker
   confirmed (it cancels only a pending copy, under a row lock against the cycle's start), or the old
   worker being LOST. Moving bumps the generation and marks the old placement `fenced`.
3. Fencing: every sync lists the worker's "fed:" copies; a live copy whose generation is not the job's
   current one (or whose job ended at the manager) is cancelled there and its placement marked stopped.
   So a lost worker that returns stops every copy of a job that moved, at its first successful sync.
   Between the loss and that sync a restartable job may run on both (the lost one unseen): the guarantee
   is "at most one copy the federation counts, and every stale copy is stopped when its worker is
   reachable" -- the same as MultiKueue's and Slurm's; non-restartable running jobs are never moved
   (state LOST, they wait for their worker).
"""
from __future__ import annotations

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler.core import federation as policy
from ..audit import record_event
from ..models import FederatedJob, MemberCluster, Quota
from .client import MemberClient, MemberRefused, MemberUnreachable

log = logging.getLogger("gpuplatform.federation")

__all__ = ["ForecastCache", "client_for", "run_round", "sync_cluster", "dispatch_pending", "withdraw_stale", "fence",
           "request_for", "views", "never_fits"]

REMOTE_TO_LOCAL = {"pending": "dispatched", "admitted": "running", "running": "running", "preempting": "running",
                   "succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled"}


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def client_for(cluster: MemberCluster) -> MemberClient:
    """The default client factory (tests pass their own `client_for=` to the functions below)."""
    return MemberClient(cluster.api_url, cluster.token())


def _parse_ext(ext: str) -> tuple[int, int] | None:
    try:
        _, jid, gen = ext.split(":")
        return int(jid), int(gen.lstrip("g"))
    except (ValueError, AttributeError):
        return None


def fence(job: FederatedJob, why: str) -> None:
    """Mark the job's current placement fenced (its copy must be stopped when its worker answers); the
    caller saves the job."""
    for p in job.placements:
        if p.get("cluster") == (job.cluster.name if job.cluster else None) and p.get("generation") == job.generation:
            p.update(fenced=True, outcome=p.get("outcome") or why)


def _move_back(job: FederatedJob, why: str) -> None:
    """Back to pending at the manager under a new generation (the old copy fenced). Caller saves."""
    fence(job, why)
    job.generation += 1
    job.state, job.cluster, job.remote_id, job.remote_state = FederatedJob.State.PENDING, None, None, ""
    job.dispatched_at = None
    job.reason = why[:500]


# --- sync -----------------------------------------------------------------------------------------------

def sync_cluster(cluster: MemberCluster, *, client_for=client_for, now=None) -> bool:
    """Read one member's summary; update its state, its jobs' states, stop fenced copies. Unreachable for
    WORKER_LOST_SECONDS -> LOST and its jobs moved (pending ones and restartable running ones). Returns
    whether the member answered."""
    now = now or timezone.now()
    client = client_for(cluster)
    try:
        summary = client.summary()
    except (MemberUnreachable, MemberRefused) as exc:
        with transaction.atomic():
            c = MemberCluster.objects.select_for_update().get(pk=cluster.pk)
            c.last_attempt_at, c.last_error = now, str(exc)[:500]
            c.unreachable_since = c.unreachable_since or now
            lost_after = timedelta(seconds=_setting("WORKER_LOST_SECONDS", 900))
            if c.state != MemberCluster.State.LOST and now - c.unreachable_since >= lost_after:
                c.state = MemberCluster.State.LOST
                c.save()
                _member_lost(c)
            else:
                if c.state != MemberCluster.State.LOST:
                    # a worker that answers 401 / 403 is up but takes not the manager's token (revoked, expired,
                    # mistyped): "refused" says what to fix (trial 16, F6: it read "unreachable"); it is lost after
                    # WORKER_LOST_SECONDS all the same, since its jobs cannot be seen
                    refused = isinstance(exc, MemberRefused) and exc.status in (401, 403)
                    c.state = MemberCluster.State.REFUSED if refused else MemberCluster.State.UNREACHABLE
                    if refused:
                        c.last_error = (f"{exc} -- the worker refuses the manager's token for it: set a valid one "
                                        f"(PATCH /api/v1/federation/clusters/{c.pk}/ with a `token`)")[:500]
                c.save()
        return False
    copies = summary.pop("jobs", []) or []
    stale = []
    with transaction.atomic():
        c = MemberCluster.objects.select_for_update().get(pk=cluster.pk)
        returned = c.state == MemberCluster.State.LOST
        c.state, c.summary, c.last_sync_at, c.last_attempt_at = MemberCluster.State.HEALTHY, summary, now, now
        c.unreachable_since, c.last_error = None, ""
        c.sync_bytes = getattr(client, "last_bytes", 0) or 0
        c.save()
        if returned:
            record_event("federation.cluster_returned", f"member cluster {c.name} answers again", data={"cluster": c.name})
        ids = {p[0] for p in (_parse_ext(x.get("external_id", "")) for x in copies) if p}
        jobs = {j.pk: j for j in FederatedJob.objects.select_for_update().filter(pk__in=ids)}
        for copy in copies:
            parsed = _parse_ext(copy.get("external_id", ""))
            job = jobs.get(parsed[0]) if parsed else None
            current = (job is not None and job.cluster_id == c.pk and job.generation == parsed[1]
                       and job.state not in FederatedJob.ENDED)
            if not current:
                if job is not None:  # a cancelled/fenced/moved copy: its state is still shown (remote_state)
                    _note_remote_state(job, c.pk, c.name, parsed[1], copy.get("state", ""))
                if copy.get("state") not in ("succeeded", "failed", "cancelled"):
                    stale.append((copy, job))
                elif job is not None:
                    _mark_stopped(job, c.name, parsed[1])
                continue
            _apply_remote(job, copy, now)
    for copy, job in stale:  # fencing: a copy the federation no longer counts is stopped
        try:
            answer = client.cancel(copy["id"], "stale federated copy (the job moved or ended at the manager)")
        except (MemberUnreachable, MemberRefused) as exc:
            log.warning("could not stop stale copy %s on %s: %s", copy, cluster.name, exc)
            continue
        with transaction.atomic():
            record_event("federation.fenced", f"stale copy {copy.get('external_id')} stopped on {cluster.name}",
                         data={"cluster": cluster.name, "copy": copy})
            if job is not None:
                job = FederatedJob.objects.select_for_update().get(pk=job.pk)
                generation = _parse_ext(copy["external_id"])[1]
                if isinstance(answer, dict) and answer.get("state"):
                    _note_remote_state(job, cluster.pk, cluster.name, generation, str(answer["state"]))
                _mark_stopped(job, cluster.name, generation)
    return True


def _note_remote_state(job: FederatedJob, cluster_pk: int, cluster: str, generation: int, remote: str) -> None:
    """Record the worker's state of a copy the federation no longer counts (the job was cancelled, fenced
    or moved): in its placement (`remote_state`) and, when it is the job's own copy (same cluster and
    generation; e.g. cancelled at the manager), in job.remote_state, so neither keeps reading `running`
    after the worker stopped it. Saves only what changed."""
    fields = set()
    for p in job.placements:
        if p.get("cluster") == cluster and p.get("generation") == generation and p.get("remote_state") != remote:
            p["remote_state"] = remote
            fields.add("placements")
    if job.cluster_id == cluster_pk and job.generation == generation and remote and job.remote_state != remote:
        job.remote_state = remote
        fields.add("remote_state")
    if fields:
        job.save(update_fields=sorted(fields))


def _mark_stopped(job: FederatedJob, cluster: str, generation: int) -> None:
    changed = False
    for p in job.placements:
        if p.get("cluster") == cluster and p.get("generation") == generation and not p.get("stopped"):
            p["stopped"] = True
            changed = True
    if changed:
        job.save(update_fields=["placements"])


def _apply_remote(job: FederatedJob, copy: dict, now) -> None:
    remote = copy.get("state", "")
    local = REMOTE_TO_LOCAL.get(remote)
    if local is None:
        return
    if job.state == FederatedJob.State.DISPATCHING and job.remote_id is None:
        job.remote_id = copy.get("id")
    before = job.state
    job.remote_state = remote
    job.state = local
    if local == "running" and job.started_at is None:
        job.started_at = now
    if local in FederatedJob.ENDED and job.finished_at is None:
        job.finished_at = now
    job.save()
    if before != job.state:
        record_event(f"federation.{job.state}", f"{job.name} {job.state} on {job.cluster.name}",
                     data={"federated_job": job.pk, "cluster": job.cluster.name, "remote_id": job.remote_id})


def _member_lost(cluster: MemberCluster) -> None:
    """Inside the caller's transaction: move the lost member's jobs (module docstring, step 2)."""
    moved, kept = [], []
    for job in FederatedJob.objects.select_for_update().filter(cluster=cluster, state__in=FederatedJob.LIVE):
        if job.state in ("dispatching", "dispatched") or job.restartable:
            _move_back(job, f"its cluster {cluster.name} was lost")
            moved.append(job.pk)
        else:
            job.state, job.reason = FederatedJob.State.LOST, f"running on {cluster.name}, which was lost; not restartable"
            kept.append(job.pk)
        job.save()
    record_event("federation.cluster_lost", f"member cluster {cluster.name} lost: {len(moved)} jobs moved, "
                 f"{len(kept)} running ones wait for it", data={"cluster": cluster.name, "moved": moved, "kept": kept})


# --- dispatch -------------------------------------------------------------------------------------------

def request_for(job: FederatedJob) -> policy.JobRequest:
    return policy.JobRequest(id=job.pk, queue=job.queue, gpus=job.gpus, task_gpus=job.task_gpus,
                             flavors=tuple(job.flavors or ()), highest_tier=job.highest_tier,
                             clusters=tuple(job.clusters or ()), selector=dict(job.cluster_selector or {}),
                             data_site=job.data_site)


def views(clusters) -> list[policy.ClusterView]:
    return [policy.view_from_summary(c.name, c.summary or {}, labels=c.labels, cost_per_gpu_hour=c.cost_per_gpu_hour,
                                     healthy=c.enabled and c.state == MemberCluster.State.HEALTHY)
            for c in clusters]


def never_fits(job: FederatedJob, members=None, request: policy.JobRequest | None = None
               ) -> tuple[dict[str, str] | None, list[str]]:
    """Could any member ever hold `job`, by the members' last summaries (flavors, node sizes, total GPUs,
    tier domains; scheduler.core.federation.never_fits)? Returns (reasons, unknown): `reasons` {member:
    why} when none could, else None; `unknown` the members (of the job's `clusters`, when it names some)
    that have not reported any GPU yet -- while one has not, nothing is refused (it may hold the job).
    `request`: the job's request to ask about instead of request_for(job) (the manager asks again with one
    field changed to tell which field is at fault: manager._never_fits_field)."""
    members = list(MemberCluster.objects.all()) if members is None else list(members)
    if job.clusters:
        members = [c for c in members if c.name in job.clusters]
    unknown = sorted(c.name for c in members if not (c.summary or {}).get("flavors"))
    if unknown or not members:
        return None, unknown
    capacity = [policy.view_from_summary(c.name, c.summary, labels=c.labels) for c in members]
    return policy.never_fits(request or request_for(job), capacity), unknown


def _federation_cap(queue: str) -> int | None:
    """The queue's federation quota: GPUs it may have in flight across clusters = the sum over its manager
    Quota rows of limit (quota where limit is blank); None (no cap) when it has no Quota rows."""
    rows = list(Quota.objects.filter(queue__name=queue).values_list("quota", "limit"))
    return sum(lim if lim is not None else q for q, lim in rows) if rows else None


def _in_flight(queue: str) -> int:
    return sum(FederatedJob.objects.filter(queue=queue, state__in=FederatedJob.LIVE).values_list("gpus", flat=True))


def _what_if_change(job: FederatedJob, flavors) -> dict:
    spec = job.spec
    roles = spec.get("roles") or []
    change = {"queue": job.queue, "tasks": sum(int(r.get("tasks", 1)) for r in roles),
              "gpus_per_task": job.task_gpus, "priority": int(spec.get("priority", 0) or 0)}
    if spec.get("time_limit_seconds"):
        change["time_limit"] = int(spec["time_limit_seconds"])
    if job.highest_tier:
        change.update(topology_mode="hard", highest_tier=job.highest_tier)
    if flavors:
        change["flavors"] = list(flavors)
    return change


class ForecastCache:
    """The forecast answers of one round, so a round asks each member at most once per job shape.

    Key: (member name, job shape, queue), where the shape is the what-if change without its queue
    (tasks, GPUs per task, priority, time limit, tier, flavors): two pending jobs of one shape in one
    queue share a member's answer. An answer is dropped when a job is dispatched to that member in the
    same round (its queue just changed), so the next job of that shape asks it again.

    Cap: at most `cap` probes (requests) per round (setting FEDERATION_FORECAST_PROBES, default 64; 0 turns
    the what-if off). A job whose uncached candidates would pass the cap is scored by the backlog rule on
    every cluster (no probe, and no cached answer either: all candidates of one decision are scored the
    same way, scheduler.core.federation.choose). A member that does not answer counts as a probe and is
    cached as "no answer" for the round. Counters: probes, hits, over_cap (decisions scored without
    forecasts because of the cap)."""

    def __init__(self, cap: int | None = None):
        self.cap = int(_setting("FEDERATION_FORECAST_PROBES", 64)) if cap is None else int(cap)
        self.answers: dict[tuple[str, str, str], float | None] = {}
        self.probes = self.hits = self.over_cap = 0

    @staticmethod
    def key(member: str, change: dict) -> tuple[str, str, str]:
        shape = json.dumps({k: v for k, v in change.items() if k != "queue"}, sort_keys=True, default=str)
        return (member, shape, str(change.get("queue", "")))

    def estimates(self, change: dict, members: list[str], probe) -> dict:
        """{member: start estimate in seconds} for `members`, asking `probe(member)` only for uncached ones,
        within the cap (all or nothing per call). `probe` raises MemberUnreachable/MemberRefused for no answer."""
        keys = {m: self.key(m, change) for m in members}
        missing = [m for m in members if keys[m] not in self.answers]
        if missing and self.probes + len(missing) > self.cap:
            self.over_cap += 1
            return {}
        self.hits += len(members) - len(missing)
        for m in missing:
            self.probes += 1
            try:
                self.answers[keys[m]] = probe(m)
            except (MemberUnreachable, MemberRefused) as exc:
                log.info("no what-if from %s: %s", m, exc)
                self.answers[keys[m]] = None
        return {m: self.answers[keys[m]] for m in members if self.answers[keys[m]] is not None}

    def forget(self, member: str) -> None:
        """Drop `member`'s answers (a job was just dispatched there)."""
        for k in [k for k in self.answers if k[0] == member]:
            del self.answers[k]

    def counts(self) -> dict:
        return {"forecast_probes": self.probes, "forecast_hits": self.hits, "forecast_over_cap": self.over_cap}


def _estimates(job, cands, clusters, client_for, forecasts: ForecastCache | None = None) -> dict:
    if not getattr(settings, "FEDERATION_USE_WHATIF", True) or not cands:
        return {}
    forecasts = forecasts if forecasts is not None else ForecastCache()
    change = _what_if_change(job, job.flavors)
    return forecasts.estimates(change, list(cands), lambda c: client_for(clusters[c]).estimate(change))


def _decide(job: FederatedJob, clusters: dict, client_for, exclude=(), forecasts: ForecastCache | None = None
            ) -> policy.Decision:
    req = request_for(job)
    vs = [v for v in views(clusters.values()) if v.name not in exclude]
    eligible = [v.name for v in vs if policy.reject_reason(req, v) is None]
    return policy.choose(req, vs, _estimates(job, eligible, clusters, client_for, forecasts))


def _send(job: FederatedJob, client_for) -> None:
    """Send the create for a DISPATCHING job (idempotent: same key, same body) and record the answer."""
    body = {**job.spec, "external_id": job.external_id}
    cluster = job.cluster
    try:
        answer = client_for(cluster).submit(body, job.idempotency_key)
    except MemberUnreachable as exc:
        log.info("dispatch of %s to %s not confirmed (%s): retried next round with the same key", job.pk,
                 cluster.name, exc)
        return
    except MemberRefused as exc:
        with transaction.atomic():
            j = FederatedJob.objects.select_for_update().get(pk=job.pk)
            if j.state != FederatedJob.State.DISPATCHING or j.generation != job.generation:
                return
            for p in j.placements:
                if p.get("cluster") == cluster.name and p.get("generation") == j.generation:
                    p.update(outcome=f"refused: {exc.body}"[:300], stopped=True)
            j.state, j.cluster, j.reason = FederatedJob.State.PENDING, None, f"{cluster.name} refused it: {exc.body}"[:500]
            j.save()
            record_event("federation.refused", f"{j.name}: {cluster.name} refused it", data={
                "federated_job": j.pk, "cluster": cluster.name, "answer": exc.body})
        return
    with transaction.atomic():
        j = FederatedJob.objects.select_for_update().get(pk=job.pk)
        if j.state != FederatedJob.State.DISPATCHING or j.generation != job.generation:
            return  # cancelled or moved meanwhile: the next sync fences the copy
        j.remote_id, j.remote_state = answer.get("id"), answer.get("state", "")
        j.state = REMOTE_TO_LOCAL.get(j.remote_state, "dispatched")
        j.dispatched_at = timezone.now()
        for p in j.placements:
            if p.get("cluster") == cluster.name and p.get("generation") == j.generation:
                p["remote_id"] = j.remote_id
        j.save()
        record_event("federation.dispatched", f"{j.name} placed on {cluster.name} (remote job {j.remote_id})",
                     data={"federated_job": j.pk, "cluster": cluster.name, "remote_id": j.remote_id,
                           "generation": j.generation, "decision": j.decision})


def _book(summary: dict, job: FederatedJob, flavor: str) -> None:
    """Count a just-dispatched job in the member's summary (until the next sync refreshes it)."""
    summary["pending_gpus"] = int(summary.get("pending_gpus", 0)) + job.gpus
    summary["pending_jobs"] = int(summary.get("pending_jobs", 0)) + 1
    share = summary.setdefault("queues", {}).setdefault(job.queue, {}).setdefault(
        flavor, {"guarantee": 0, "quota": 0, "limit": None, "used": 0})
    share["used"] = int(share.get("used", 0)) + job.gpus


def dispatch_pending(*, client_for=client_for, limit: int = 500, forecasts: ForecastCache | None = None) -> dict:
    """Re-send DISPATCHING jobs (crash recovery), then place PENDING ones in submission order within their
    queue's federation quota. `forecasts`: the round's ForecastCache (a new one when None). Returns
    {"resent", "dispatched", "waiting"}."""
    forecasts = forecasts if forecasts is not None else ForecastCache()
    out = {"resent": 0, "dispatched": 0, "waiting": 0}
    for job in FederatedJob.objects.select_related("cluster").filter(state=FederatedJob.State.DISPATCHING):
        if job.cluster.state == MemberCluster.State.HEALTHY:
            _send(job, client_for)
            out["resent"] += 1
    clusters = {c.name: c for c in MemberCluster.objects.all()}
    flight: dict[str, int] = {}
    for job in FederatedJob.objects.filter(state=FederatedJob.State.PENDING).order_by("submitted_at", "id")[:limit]:
        if job.queue not in flight:
            flight[job.queue] = _in_flight(job.queue)
        cap = _federation_cap(job.queue)
        impossible, _unknown = never_fits(job, clusters.values())
        if impossible:
            _wait(job, policy.never_fits_message(request_for(job), impossible))
            out["waiting"] += 1
            continue
        if cap is not None and job.gpus > cap:
            _wait(job, f"needs {job.gpus} GPUs and the federation quota of queue {job.queue} is {cap} GPUs: "
                       f"it can never start unless the quota is raised")
            out["waiting"] += 1
            continue
        if cap is not None and flight[job.queue] + job.gpus > cap:
            _wait(job, f"federation quota: {flight[job.queue]} of {cap} GPUs of queue {job.queue} in flight")
            out["waiting"] += 1
            continue
        refused = {p["cluster"] for p in job.placements
                   if p.get("generation") == job.generation and str(p.get("outcome", "")).startswith("refused")}
        decision = _decide(job, clusters, client_for, exclude=refused, forecasts=forecasts)
        if decision.cluster is None:
            if refused and _refused_everywhere(job, clusters, refused):
                out["failed"] = out.get("failed", 0) + 1
                continue
            # the members that refused it this generation say why too (new-user trial 14, F5: a job both healthy
            # members refused waited as "no member cluster is healthy")
            why = {**decision.rejected, **_refusals(job)}
            _wait(job, "no cluster can run it: " + "; ".join(f"{k}: {v}" for k, v in sorted(why.items()))
                  if why else "no member cluster is healthy")
            out["waiting"] += 1
            continue
        with transaction.atomic():
            j = FederatedJob.objects.select_for_update().get(pk=job.pk)
            if j.state != FederatedJob.State.PENDING:
                continue
            j.state, j.cluster, j.decision, j.reason = (FederatedJob.State.DISPATCHING, clusters[decision.cluster],
                                                        decision.as_dict(), "")
            j.placements = [*j.placements, {"cluster": decision.cluster, "generation": j.generation,
                                            "flavor": decision.flavor, "at": timezone.now().isoformat()}]
            j.save()
        _send(j, client_for)
        flight[job.queue] += job.gpus
        _book(clusters[decision.cluster].summary, job, decision.flavor)
        forecasts.forget(decision.cluster)
        out["dispatched"] += 1
    return out


def _refusals(job: FederatedJob) -> dict[str, str]:
    """{member: its refusal} of the job's current generation (placements' outcome "refused: {...}")."""
    return {p["cluster"]: str(p.get("outcome", "")) for p in job.placements
            if p.get("generation") == job.generation and str(p.get("outcome", "")).startswith("refused")}


def _refused_everywhere(job: FederatedJob, clusters: dict, refused: set) -> bool:
    """End `job` as failed when every member it may go to (its `clusters`, else all) refused its submission
    (a 400 of the member's jobs API: a priority its rules refuse, a GPU share no GPU of it takes): it would
    wait for ever, and the members' answers are the true reason (new-user trial 14, F5). Returns whether it
    did."""
    allowed = [name for name in clusters if not job.clusters or name in job.clusters]
    if not allowed or not set(allowed) <= refused:
        return False
    refusals = _refusals(job)
    reason = ("every member cluster refused it: " + "; ".join(f"{k}: {v}" for k, v in sorted(refusals.items())))[:500]
    with transaction.atomic():
        j = FederatedJob.objects.select_for_update().get(pk=job.pk)
        if j.state != FederatedJob.State.PENDING or j.generation != job.generation:
            return False
        j.state, j.reason, j.finished_at = FederatedJob.State.FAILED, reason, timezone.now()
        j.save()
        record_event("federation.refused_everywhere", f"{j.name}: every member cluster refused it", data={
            "federated_job": j.pk, "answers": refusals})
    return True


def _wait(job: FederatedJob, reason: str) -> None:
    if job.reason != reason[:500]:
        FederatedJob.objects.filter(pk=job.pk, state=FederatedJob.State.PENDING).update(reason=reason[:500])


def withdraw_stale(*, client_for=client_for, now=None, margin_s: float = 300.0,
                   forecasts: ForecastCache | None = None) -> int:
    """Jobs DISPATCHED (still pending on their worker) for DISPATCH_TIMEOUT where another cluster now
    scores better by `margin_s`: withdraw (the worker confirms only while pending), then back to pending
    under a new generation for dispatch_pending. `forecasts`: the round's ForecastCache. Returns how many
    were withdrawn."""
    forecasts = forecasts if forecasts is not None else ForecastCache()
    now = now or timezone.now()
    timeout = _setting("DISPATCH_TIMEOUT", 600)
    clusters = {c.name: c for c in MemberCluster.objects.all()}
    moved = 0
    for job in FederatedJob.objects.select_related("cluster").filter(
            state=FederatedJob.State.DISPATCHED, dispatched_at__lte=now - timedelta(seconds=timeout)):
        if job.cluster.state != MemberCluster.State.HEALTHY or job.remote_id is None:
            continue
        decision = _decide(job, clusters, client_for, forecasts=forecasts)
        current = next((c for c in decision.candidates if c.cluster == job.cluster.name), None)
        best = next((c for c in decision.candidates if c.cluster != job.cluster.name), None)
        waited = (now - job.dispatched_at).total_seconds()
        if not policy.should_withdraw(waited, timeout, current, best, margin_s=margin_s):
            continue
        try:
            confirmed = client_for(job.cluster).withdraw(job.remote_id)
        except (MemberUnreachable, MemberRefused):
            continue
        if not confirmed:
            continue  # it started meanwhile: it stays (the next sync sees it running)
        with transaction.atomic():
            j = FederatedJob.objects.select_for_update().get(pk=job.pk)
            if j.state != FederatedJob.State.DISPATCHED or j.generation != job.generation:
                continue
            old = j.cluster.name
            _move_back(j, f"withdrawn from {old} after {int(waited)} s: {best.cluster} would start it sooner")
            for p in j.placements:
                if p.get("cluster") == old and p.get("generation") == job.generation:
                    p["stopped"] = True
            j.save()
            record_event("federation.withdrawn", f"{j.name} withdrawn from {old}", data={
                "federated_job": j.pk, "cluster": old, "better": best.as_dict(),
                "current": current.as_dict() if current else None})
        moved += 1
    return moved


def run_round(*, client_for=client_for, now=None) -> dict:
    """One manager round: sync every member, withdraw stale dispatches, dispatch. One ForecastCache serves
    the round's withdraw checks and dispatches (at most FEDERATION_FORECAST_PROBES what-if requests).
    Returns counts, with forecast_probes / forecast_hits / forecast_over_cap."""
    synced = sum(sync_cluster(c, client_for=client_for, now=now) for c in MemberCluster.objects.all())
    forecasts = ForecastCache()
    withdrawn = withdraw_stale(client_for=client_for, now=now, forecasts=forecasts)
    out = dispatch_pending(client_for=client_for, forecasts=forecasts)
    return {"synced": synced, "withdrawn": withdrawn, **out, **forecasts.counts()}
