"""The manager's write services (every write here: atomic, audited as an Event of kind "federation.*").

    register_cluster(name=, api_url=, token=, labels=, cost_per_gpu_hour=, enabled=, actor=) -> MemberCluster
    update_cluster(cluster, actor=, **fields)          token= replaces the stored (encrypted) token
    submit_federated_job(team=, body=, submitter=) -> FederatedJob   (body: the worker's job submission plus
        "clusters": [names], "cluster_selector": {label: value}, "data_site": str, "restartable": bool)
    cancel_federated_job(job, actor=, reason=) -> FederatedJob

Raises gpuplatform.errors.ValidationError naming the field for bad input. Dispatching lives in dispatch.py.
"""
from __future__ import annotations

import functools
import re

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from .. import access
from ..audit import record_event
from ..errors import ValidationError
from ..inputs import text_rule_error
from ..job_rules import MAX_TIER, check_job, resolve_tier
from ..models import FederatedJob, MemberCluster, Queue
from ..names import control_character_error
from ..wording import count

__all__ = ["register_cluster", "update_cluster", "submit_federated_job", "submit_as", "cancel_federated_job",
           "gpu_figures", "job_gpu_figures", "is_manager", "require_manager", "NOT_MANAGER", "FED_FIELDS"]


def is_manager() -> bool:
    """Whether this instance is a federation manager (setting FEDERATION_ROLE == "manager"): then the
    ordinary job form, POST /api/v1/jobs/ and gpuctl submit to the federation (one front door)."""
    return getattr(settings, "FEDERATION_ROLE", "worker") == "manager"

FED_FIELDS = ("clusters", "cluster_selector", "data_site", "restartable")


@functools.cache
def submit_serializer():
    """The serializer a manager checks a job body with: the jobs API's JobSubmitSerializer, which also lets
    through the federation's own FED_FIELDS (checked by submit_federated_job) and names them among the accepted
    fields when it refuses an unknown key. Without them the list read "name, external_id, ..., subgroups" on a
    manager, which takes `clusters` as well (new-user trial 27)."""
    from ..api.serializers import JobSubmitSerializer

    return type("FederatedSubmitSerializer", (JobSubmitSerializer,), {
        "__module__": __name__, "extra_fields": (*JobSubmitSerializer.extra_fields, *FED_FIELDS),
        "__doc__": "A job body on a federation manager: JobSubmitSerializer's fields plus FED_FIELDS."})


LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")


def _check_labels(labels, field: str = "labels") -> dict:
    if not isinstance(labels, dict):
        raise ValidationError({field: "an object of label: value strings"})
    for k, v in labels.items():
        if not isinstance(k, str) or not LABEL_RE.match(k):
            raise ValidationError({field: f"label name {k!r}: letters, digits, '_', '.', '-', '/', at most 63"})
        if not isinstance(v, str) or len(v) > 100:
            raise ValidationError({f"{field}.{k}": "a string of at most 100 characters"})
        _check_one_line(f"{field}.{k}", v)
    return dict(labels)


def _check_one_line(field: str, value: str) -> None:
    """The API's text rule for one-line text (inputs.text_rule_error, one_line: a job's or a team's name follows it)
    on a federation field the jobs serializer does not read (`data_site`, a label value): a control character, a
    newline or an invisible format character is the same 400 as on any other text field, text of only white space
    too ("a\\u0007b" as a data_site was stored and dispatched: new-user trial 25)."""
    refused = text_rule_error(value, one_line=True)
    if refused:
        raise ValidationError({field: refused[0]})


CLUSTER_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
CLUSTER_NAME_RULE = "a member cluster name is 1 to 63 lower-case letters, digits and '-', starting with a letter or digit"


def cluster_name_error(name) -> str | None:
    """The one wording of a member cluster name that breaks the rule (CLUSTER_NAME_RULE), for POST and PATCH / PUT
    /api/v1/federation/clusters/ (the serializer's `name`), the admin's form and register_cluster / update_cluster
    alike; None when `name` keeps it. The API's name was a SlugField that answered Django's "Enter a valid slug ..."
    or "Ensure this field has no more than 64 characters." for some broken names and this rule for others."""
    if isinstance(name, str) and CLUSTER_NAME_RE.fullmatch(name):
        return None
    return CLUSTER_NAME_RULE


def _check_cluster_fields(fields: dict) -> None:
    if "name" in fields and cluster_name_error(fields["name"]):
        raise ValidationError({"name": cluster_name_error(fields["name"])})
    if "api_url" in fields and not re.match(r"^https?://[^\s/]+(/[^\s]*)?$", fields["api_url"] or ""):
        raise ValidationError({"api_url": "an http:// or https:// address"})
    if "token" in fields and (not isinstance(fields["token"], str) or not 1 <= len(fields["token"]) <= 500):
        raise ValidationError({"token": "the member's service token (1-500 characters)"})
    if "cost_per_gpu_hour" in fields:
        try:
            cost = float(fields["cost_per_gpu_hour"])
        except (TypeError, ValueError):
            cost = -1.0
        if not 0 <= cost <= 1e6:
            raise ValidationError({"cost_per_gpu_hour": "a number from 0 to 1,000,000"})
    if "labels" in fields:
        _check_labels(fields["labels"])


def name_taken(name: str) -> str:
    """The one wording of a member cluster name that is taken (the API, the admin, however the requests meet)."""
    return f"a member cluster named {name!r} already exists"


def _refuse_taken_name(name: str, *, other_than=None) -> None:
    """ValidationError ("name", name_taken) when another member cluster has `name`. Holds the name's lock
    (scheduling.locks.lock_name) until the transaction ends, so of two creations (or renames) to one name at
    once the second reads the first's row and answers this, never the unique index's error (trial 18a: two
    creations at once answered two different wordings)."""
    from ..scheduling.locks import lock_name

    lock_name("member cluster name", name)
    if MemberCluster.objects.filter(name=name).exclude(pk=other_than).exists():
        raise ValidationError({"name": name_taken(name)})


@transaction.atomic
def register_cluster(*, name: str, api_url: str, token: str, labels: dict | None = None,
                     cost_per_gpu_hour: float = 0.0, enabled: bool = True, actor=None) -> MemberCluster:
    """Add a member cluster (Event "federation.cluster_added"). Raises ValidationError naming the field: a name
    that breaks the rule or is taken ("name": name_taken, under the name's lock), an address, a token, labels or a
    cost that break theirs."""
    fields = {"name": name, "api_url": api_url, "token": token, "labels": labels or {},
              "cost_per_gpu_hour": cost_per_gpu_hour}
    _check_cluster_fields(fields)
    _refuse_taken_name(name)
    c = MemberCluster(name=name, api_url=api_url.rstrip("/"), labels=fields["labels"],
                      cost_per_gpu_hour=float(cost_per_gpu_hour), enabled=enabled)
    c.set_token(token)
    c.save()
    record_event("federation.cluster_added", f"member cluster {name} added ({api_url})", actor=actor,
                 data={"cluster": name, "labels": c.labels, "cost_per_gpu_hour": c.cost_per_gpu_hour})
    return c


@transaction.atomic
def update_cluster(cluster: MemberCluster, *, actor=None, **fields) -> MemberCluster:
    allowed = {"name", "api_url", "token", "labels", "cost_per_gpu_hour", "enabled"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValidationError({unknown[0]: "not a field of a member cluster"})
    _check_cluster_fields(fields)
    if "name" in fields:
        _refuse_taken_name(fields["name"], other_than=cluster.pk)
    cluster = MemberCluster.objects.select_for_update().get(pk=cluster.pk)
    for k, v in fields.items():
        if k == "token":
            cluster.set_token(v)
        elif k == "api_url":
            cluster.api_url = v.rstrip("/")
        else:
            setattr(cluster, k, float(v) if k == "cost_per_gpu_hour" else v)
    cluster.save()
    record_event("federation.cluster_changed", f"member cluster {cluster.name} changed: {', '.join(sorted(fields))}",
                 actor=actor, data={"cluster": cluster.name, "fields": sorted(k for k in fields if k != "token")})
    return cluster


# The members' container runtimes are theirs to check (a member without one refuses an `image`): at the manager
# check_job's image rule is given a runtime so that it checks the image reference only.
MEMBERS_RUNTIMES = frozenset({"(each member's own)"})
# The tiers a member has are checked by the dispatcher against its summary (dispatch.never_fits): at the manager
# every tier number from 1 to job_rules.MAX_TIER exists, so check_job applies the tier rules but not the presence one.
ANY_TIER = range(1, MAX_TIER + 1)


def _check_job_rules(d: dict, *, team, queue) -> list[dict]:
    """The job-level rules a member applies (services.jobs.submit_job), applied at the manager through the same
    functions, so that a body every member would refuse is a 400 naming the field here rather than a job that
    ends "every member cluster refused it" (new-user trial 17, F3): external_id without control characters,
    the rescheduling and interruptible rules (services.jobs.check_migration / check_interruptible), tier names
    (job_rules.resolve_tier), then job_rules.check_job: roles and sub-groups, name, priority bounds, numa,
    topology_mode / highest_tier / preferred_tier, time_limit_seconds, command / env / working_dir / image,
    max_restarts, completion_role, and the queue's own rules (open, a leaf, the team's) on the manager's queue tree.
    What only a member knows is left to the members and the dispatcher: its tiers and container runtimes,
    whether the job fits its nodes (never_fits), its queues. `d`: JobSubmitSerializer's validated data.
    Returns the normalised roles (check_job's). Raises ValidationError naming each bad field."""
    from ..lifecycle import closed_ancestor
    from ..services.jobs import check_interruptible, check_migration

    bad_external_id = control_character_error("external_id", d.get("external_id", ""))
    if bad_external_id:
        raise ValidationError({"external_id": bad_external_id})
    check_migration(d["migratable"], d["min_run_before_move_seconds"], d["checkpoint_grace_seconds"],
                    preemptible=d["preemptible"])
    check_interruptible(d["interruptible"], d["preemptible"])
    highest_tier, tier_errors = resolve_tier(d["highest_tier"], "highest_tier")
    preferred_tier, preferred_errors = resolve_tier(d["preferred_tier"], "preferred_tier")
    if tier_errors or preferred_errors:
        raise ValidationError({**tier_errors, **preferred_errors})
    return check_job(team=team, queue=queue, queue_has_children=Queue.objects.filter(parent=queue).exists(),
                     closed_ancestor=closed_ancestor(queue.pk), name=d["name"], roles=[dict(r) for r in d["roles"]],
                     subgroups=[dict(g) for g in d["subgroups"] or ()], priority=d["priority"],
                     topology_mode=d["topology_mode"], highest_tier=highest_tier, preferred_tier=preferred_tier,
                     time_limit_seconds=d["time_limit_seconds"], duration_seconds=None, tiers=ANY_TIER,
                     error_class=ValidationError, command=d["command"], env=d["env"], working_dir=d["working_dir"],
                     image=d["image"], max_restarts=d["max_restarts"], completion_role=d["completion_role"] or "",
                     container_runtimes=MEMBERS_RUNTIMES, numa=d["numa"])


NOT_MANAGER = "this instance is not a federation manager (FEDERATION_ROLE)"


def require_manager(field: str = "detail") -> None:
    """Raise ValidationError({field: NOT_MANAGER}) unless this instance is a federation manager: a worker
    (or a standalone cluster) has no member clusters, so a job submitted to its federation could never move."""
    if not is_manager():
        raise ValidationError({field: NOT_MANAGER})


def _never_fits_field(job: FederatedJob, roles: list[dict], members: list) -> str:
    """The role field a job no member can ever hold is refused under, as job submission keys a job that can never
    fit its cluster (fit_check.refusal_errors), told by the dispatcher's own rule (dispatch.never_fits, asked again
    about an eased request; the rule is not copied here), in submission's order: `roles[j].flavor` when a member
    could hold the job on another flavor (the first role naming one); `roles[j].gpus_per_task` when no member
    could hold even one task of role j (the first such role; its flavor when another flavor would hold it);
    else the GPUs in all (or in one domain of its tier): `roles[0].tasks` for the only role, `roles` for the roles
    together. `roles`: the normalised roles (check_job), in the request's order."""
    from dataclasses import replace

    from .dispatch import never_fits, request_for

    request = request_for(job)
    flavor = next((f"roles[{j}].flavor" for j, r in enumerate(roles) if r.get("flavor")), "roles")

    def fits(**eased) -> bool:
        return never_fits(job, members, request=replace(request, **eased))[0] is None

    if request.flavors and fits(flavors=()):
        return flavor
    for j, r in enumerate(roles):
        one = r["gpus_per_task"]
        if one and not fits(gpus=one, task_gpus=one):  # not even one task of this role
            return flavor if request.flavors and fits(gpus=one, task_gpus=one, flavors=()) else \
                f"roles[{j}].gpus_per_task"
    return "roles[0].tasks" if len(roles) == 1 else "roles"


def _never_fits_or_reason(job: FederatedJob, roles: list[dict]) -> str:
    """Refuse (ValidationError naming the field: `clusters`, `cluster_selector`, else the role field at fault,
    _never_fits_field) a job no registered member could ever hold, by their last summaries (dispatch.never_fits);
    else the truthful reason it waits with. `roles`: the job's normalised roles (check_job)."""
    from scheduler.core import federation as policy
    from .dispatch import never_fits, request_for

    members = list(MemberCluster.objects.all())
    reasons, unknown = never_fits(job, members)
    if reasons:
        why = set(reasons.values())
        field = ("clusters" if job.clusters and why == {"not in the job's clusters"} else
                 "cluster_selector" if all(w.startswith("label ") for w in why) else
                 _never_fits_field(job, roles, members))
        raise ValidationError({field: "can never fit any member cluster: "
                                      + policy.never_fits_message(request_for(job), reasons)})
    if not members:
        return "no member cluster is registered yet: it is dispatched once one is added and reports its capacity"
    if unknown and len(unknown) == len([c for c in members if not job.clusters or c.name in job.clusters]):
        return (f"no member cluster has reported its capacity yet ({', '.join(unknown)}): it is dispatched "
                f"after the first sync")
    return "waiting for the federation's next dispatch round"


@transaction.atomic
def submit_federated_job(*, team, body: dict, submitter=None) -> FederatedJob:
    """Validate `body` as the jobs API does (JobSubmitSerializer) plus the federation fields, check the
    manager's queue belongs to `team`, and store the job pending at the manager (the dispatcher places it)."""
    require_manager()
    if not isinstance(body, dict):
        raise ValidationError({"body": "a JSON object"})
    fed = {k: body[k] for k in FED_FIELDS if k in body}
    spec = {k: v for k, v in body.items() if k not in FED_FIELDS and k not in ("external_id", "team")}
    # null is "none given"; any other value is taken as sent, never converted ([] was stored as {}; new-user trial
    # 16, F6), and a member named twice is refused rather than kept twice
    clusters = [] if fed.get("clusters") is None else fed["clusters"]
    if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
        raise ValidationError({"clusters": "a list of member cluster names"})
    twice = next((c for i, c in enumerate(clusters) if c in clusters[:i]), None)
    if twice is not None:
        raise ValidationError({"clusters": f"member cluster {twice!r} is named twice"})
    unknown = sorted(set(clusters) - set(MemberCluster.objects.values_list("name", flat=True)))
    if unknown:
        raise ValidationError({"clusters": f"unknown member cluster {unknown[0]!r}"})
    selector = _check_labels({} if fed.get("cluster_selector") is None else fed["cluster_selector"], "cluster_selector")
    data_site = "" if fed.get("data_site") is None else fed["data_site"]
    if not isinstance(data_site, str) or len(data_site) > 100:
        raise ValidationError({"data_site": "a string of at most 100 characters"})
    _check_one_line("data_site", data_site)
    restartable = fed.get("restartable", False)
    if not isinstance(restartable, bool):
        raise ValidationError({"restartable": "true or false"})
    # external_id is the manager's own on a member copy (FederatedJob.external_id) and is not kept in `spec`, but
    # it is checked as a worker checks it: a bad one is a 400 here too
    ser = submit_serializer()(data={**spec, **({"external_id": body["external_id"]} if "external_id" in body else {})})
    if not ser.is_valid():
        field, msgs = next(iter(ser.errors.items()))
        raise ValidationError({field: str(msgs[0] if isinstance(msgs, list) else msgs)})
    d = ser.validated_data
    queue = Queue.objects.filter(name=d["queue"]).first()
    if queue is None or queue.team_id is None:
        raise ValidationError({"queue": f"unknown team queue {d['queue']!r}"})
    if queue.team_id != team.pk:
        raise ValidationError({"queue": f"queue {queue.name} is not team {team.slug}'s"})
    roles = _check_job_rules(d, team=team, queue=queue)
    # The members' own rule: the federation submits to each member as its federation-managers account (no team,
    # not a team admin: docs/federation.md), and a member gives a priority above 0 to a team admin only, so every
    # member refuses such a job; it was accepted and waited for ever (new-user trial 14, F5)
    if isinstance(d.get("priority"), int) and d["priority"] > 0:
        raise ValidationError({"priority": f"a federated job runs at priority 0 or lower: the manager submits to its "
                                           f"member clusters as their federation-managers account, not a team "
                                           f"admin, and a member takes a priority above 0 from a team admin only "
                                           f"(got {d['priority']})"})
    gpus = sum(r["tasks"] * r["gpus_per_task"] for r in roles)  # whole GPUs to place (dispatch); the API shows
    flavors: set[str] = set()                                   # GPU-equivalents (api.FederatedJobSerializer)
    for r in roles:
        flavors.update(f for f in (r.get("flavor") or "").split("|") if f)
    job = FederatedJob(
        name=d["name"], team=team, queue=queue.name, submitter=submitter, spec=spec, gpus=gpus,
        task_gpus=max(r["gpus_per_task"] for r in roles), flavors=sorted(flavors),
        highest_tier=resolve_tier(d["highest_tier"], "highest_tier")[0] if d["topology_mode"] == "hard" else None,
        clusters=clusters, cluster_selector=selector, data_site=data_site,
        restartable=restartable or bool(d["migratable"]))
    job.reason = _never_fits_or_reason(job, roles)
    job.save()
    shown, request = gpu_figures(roles)
    what = count(shown, "GPU") if all(p.isdigit() for p in request.split("+")) else f"{shown} GPU-equivalents ({request})"
    record_event("federation.submitted", f"{job.name} submitted to the federation ({what})", actor=submitter,
                 queue=queue, data={"federated_job": job.pk, "team": team.slug, "gpus": shown, "gpu_request": request})
    return job


def gpu_figures(roles) -> tuple[int | float, str]:
    """What normalised role dicts (job_rules.check_roles / check_job) ask for, as a worker's jobs API shows it
    (gpu_request.py, the one computation): (GPU-equivalents, e.g. 0.5 for one task of half a GPU; the request,
    e.g. "1x0.5"). A GPU-memory share counts 0 here (its share depends on the member's GPU; gpu_equivalents
    of a pending job with no GPU to measure it against). FederatedJob.gpus stays the whole GPUs the dispatcher
    places (a share takes one GPU)."""
    from types import SimpleNamespace

    from ..gpu_request import gpu_equivalents, gpu_request

    rows = [SimpleNamespace(**r) for r in roles]
    return gpu_equivalents(rows), gpu_request(rows)


def job_gpu_figures(job: FederatedJob) -> tuple[int | float, str]:
    """gpu_figures of a stored federated job's roles (its `spec`, checked at submission); a spec whose roles no
    longer pass (a rule tightened since) shows the stored whole GPUs and a blank request."""
    from ..job_rules import check_roles

    spec = job.spec if isinstance(job.spec, dict) else {}
    roles, errors = check_roles(spec.get("roles"))
    if errors or not roles:
        return job.gpus, ""
    return gpu_figures(roles)


def submit_as(*, user, body: dict) -> FederatedJob:
    """The front door on a manager (the job form, POST /api/v1/jobs/, POST /api/v1/federation/jobs/, gpuctl):
    the job's team is its queue's; a `team` in the body must be that team. Raises ValidationError naming
    `queue` / `team` (then submit_federated_job's), django's PermissionDenied when `user` may not submit
    the team's jobs; ValidationError("detail") on an instance that is not a federation manager."""
    require_manager()
    if not isinstance(body, dict):
        raise ValidationError({"body": "a JSON object"})
    name = body.get("queue") if isinstance(body.get("queue"), str) else ""
    queue = Queue.objects.filter(name=name).select_related("team").first()
    if queue is None or queue.team_id is None:
        raise ValidationError({"queue": f"unknown team queue {body.get('queue')!r}"})
    team = body.get("team")
    if team not in (None, "") and team != queue.team.slug and getattr(team, "pk", None) != queue.team_id:
        raise ValidationError({"team": f"queue {queue.name} is team {queue.team.slug}'s, not {team}'s"})
    if not access.can_submit(user, queue.team_id):
        raise PermissionDenied("only members and admins of the team (or platform admins) may submit its jobs")
    return submit_federated_job(team=queue.team, body=dict(body), submitter=user)


def cancel_federated_job(job: FederatedJob, *, actor=None, reason: str = "", client_for=None) -> FederatedJob:
    """Cancel at the manager and stop the worker's copy. An unreachable worker's copy is fenced: stopped
    when the worker answers again (dispatch.sync_cluster). Raises ValidationError("state") once ended.

    One transaction holds the job's row lock from the state check to the write and its Event, the worker's
    answer included: of cancels sent at once exactly one acts (one `federation.cancelled` Event, one stop sent
    to the worker) and the others, waiting on the lock, read the job cancelled and get the 400 a second cancel
    gets (new-user trial 17, F5: 10 at once gave 7 x 200, 7 Events and 7 stops). The worker's answer is
    bounded by FEDERATION_HTTP_TIMEOUT; a dispatch round touching the job waits for it as well."""
    from .dispatch import client_for as default_client, fence
    from .client import MemberRefused, MemberUnreachable

    with transaction.atomic():
        job = FederatedJob.objects.select_for_update().get(pk=job.pk)
        if job.state in FederatedJob.ENDED:
            raise ValidationError({"state": f"job is {job.state}, not pending or running"})  # the jobs API's words
        cluster, remote, was = job.cluster, job.remote_id, job.state
        stopped = cluster is None
        remote_state = None  # the worker's answer to the cancel; later syncs keep it current (dispatch.sync_cluster)
        if cluster is not None:
            try:
                if remote is None:
                    found = (client_for or default_client)(cluster).find(job.external_id)
                    remote = found["id"] if found else None
                if remote is not None:
                    answer = (client_for or default_client)(cluster).cancel(
                        remote, reason or "cancelled at the federation manager")
                    if isinstance(answer, dict) and answer.get("state"):
                        remote_state = str(answer["state"])
                stopped = True
            except (MemberUnreachable, MemberRefused):
                stopped = False
        if not stopped:
            fence(job, "cancelled while its worker was unreachable")
        job.state, job.finished_at = FederatedJob.State.CANCELLED, timezone.now()
        job.reason = reason[:500]
        if remote_state:
            job.remote_state = remote_state
        job.save()
        record_event("federation.cancelled", f"{job.name} cancelled" + (f": {reason}" if reason else ""),
                     actor=actor, data={"federated_job": job.pk, "was": was,
                                        "cluster": cluster.name if cluster else None, "copy_stopped": stopped})
    return job


def visible_federated_jobs(user):
    """The federated jobs `user` may see: platform admins (and ops) all, others their teams' only."""
    qs = FederatedJob.objects.select_related("team", "cluster", "submitter")
    if access.sees_all(user):
        return qs
    return qs.filter(team_id__in=access.visible_team_ids(user) or ())
