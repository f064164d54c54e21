"""Job writes from the browser: the submission form and the cancel button. Both go through the same
services as the REST API (services.submit_job, services.cancel_job) and the same permission rule
(access.can_submit: a member or admin of the job's team, or a platform admin)."""
from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone as dt_timezone
from functools import wraps

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from gpuplatform import access, dashboard_queries, queries, services
from gpuplatform.federation.manager import is_manager, submit_as
from gpuplatform.api.filters import REPEATED
from gpuplatform.inputs import html_only, renders_form_errors
from gpuplatform.login import login_required
from gpuplatform.models import Job, Team

from .conditional import login_required_json
from .forms import JobForm, RoleFormSet, apply_service_errors


def _form_kwargs(user) -> dict:
    # Closed and draining queues stay in the list: the service answers why they take no jobs.
    queues = [(q.name, q.team.name) for q in access.submit_queues(user)]
    tiers = sorted(queries.cluster_tiers())  # the engine's tiers, as submission checks them
    return {"teams": list(access.submit_teams(user).values_list("name", flat=True)), "queues": queues, "tiers": tiers}


FORM_TOKEN = "submit_token"  # the submit form's one-time token (a hidden field)
_TOKEN = re.compile(r"[0-9a-f]{32}")


def new_form_token() -> str:
    return uuid.uuid4().hex


def once_per_form_token(view):
    """A submit form posted twice with its one-time token (a double click, a resent POST) submits once: the second
    POST waits for the first (the token's lock, api.idempotency's store: IdempotencyKey "form:<token>", per user,
    IDEMPOTENCY_KEY_TTL_SECONDS) and is sent where the first one went (its job's page), with a line saying nothing
    new was submitted, as the API replays a POST with the same Idempotency-Key (new-user trial 25, D: two POSTs of
    one /jobs/new/ form made two jobs). The same token with other values (the form changed after going back) is
    the form again with an error and a fresh token: submitting that creates. A POST without a token (a script)
    behaves as before."""
    from gpuplatform.api.idempotency import data_fingerprint, live_row
    from gpuplatform.models import IdempotencyKey

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        token = request.POST.get(FORM_TOKEN, "") if request.method == "POST" else ""
        if not _TOKEN.fullmatch(token) or not request.user.is_authenticated:
            return view(request, *args, **kwargs)
        key = f"form:{token}"
        fp = data_fingerprint("POST", request.path, request.POST, skip=(FORM_TOKEN,))
        with transaction.atomic():
            row = live_row(request.user, key)
            if row is not None:
                if row.fingerprint == fp and row.path == request.path:
                    messages.info(request, "This form was already submitted; nothing new was submitted. "
                                           "Its job is shown here.")
                    return redirect(row.body["location"])
                request.form_submitted_before = row.body.get("location") or row.path
                return view(request, *args, **kwargs)
            response = view(request, *args, **kwargs)
            if response.status_code == 302 and getattr(request, "form_created", False):
                IdempotencyKey.objects.filter(user=request.user, key=key).delete()  # an expired row of this key
                IdempotencyKey.objects.create(user=request.user, key=key, fingerprint=fp, method="POST",
                                              path=request.path[:500], status=302,
                                              body={"location": response["Location"]}, created_at=timezone.now())
            return response
    return wrapped


@renders_form_errors  # a NUL in a field comes back as that field's error on the form (inputs.py)
@login_required
@require_http_methods(["GET", "POST"])
@html_only("POST /api/v1/jobs/ (the REST API; gpuctl submit)")
@once_per_form_token
def job_new(request):
    kwargs = _form_kwargs(request.user)
    manager = is_manager()
    flavors = _member_flavors() if manager else dashboard_queries.flavors()
    if not kwargs["teams"]:
        raise PermissionDenied("You are not a member of any team, so you cannot submit jobs.")
    if request.method == "POST":
        form = JobForm(request.POST, **kwargs)
        roles = RoleFormSet(request.POST, prefix="roles", form_kwargs={"flavors": flavors, "tiers": kwargs.get("tiers", ())})
        valid = form.is_valid() and roles.is_valid()
        # A key given twice is refused, as the API refuses it (README; new-user trial 14, F14: roles-0-tasks=1&
        # roles-0-tasks=64 submitted 64 tasks, the last value); no field of this form takes several values.
        for key in sorted(k for k, values in request.POST.lists() if len(values) > 1):
            form.add_error(None, f"{key}: {REPEATED}")
            valid = False
        earlier = getattr(request, "form_submitted_before", None)
        if earlier:  # this form's token already submitted other values (once_per_form_token)
            form.add_error(None, f"This form was already submitted (see {earlier}) with other values; nothing was "
                                 f"submitted now. Submit it again to submit these values as a new job.")
            valid = False
        if valid:
            data = form.cleaned_data
            team = Team.objects.get(name=data["team"])
            minutes = data.get("time_limit_minutes")
            if manager:
                return _submit_federated(request, form, roles, team, data, minutes) or render(
                    request, "frontend/job_form.html", {"form": form, "roles": roles, "queue_teams": dict(kwargs["queues"]),
                                                        FORM_TOKEN: new_form_token()})
            try:
                job = services.submit_job(
                    team=team, queue=data["queue"], name=data["name"], roles=[f.role() for f in roles.forms],
                    priority=data["priority"], preemptible=data["preemptible"], topology_mode=data["topology_mode"],
                    interruptible=data.get("interruptible") or False, highest_tier=data.get("highest_tier"), preferred_tier=data.get("preferred_tier"),
                    time_limit_seconds=minutes * 60 if minutes else None, submitter=request.user,
                    command=data["command"], env=data["env"], working_dir=data.get("working_dir") or "",
                    image=data.get("image") or "", max_restarts=data.get("max_restarts") or 0,
                    completion_role=data.get("completion_role") or "", numa=data.get("numa") or "prefer",
                    migratable=data.get("migratable") or False,
                    min_run_before_move_seconds=(data.get("min_run_before_move_minutes") or 0) * 60,
                    checkpoint_grace_seconds=data.get("checkpoint_grace_seconds"))
            except services.ValidationError as exc:
                apply_service_errors(exc.errors, form, roles)
            else:
                request.form_created = True  # once_per_form_token remembers where this token's submit went
                messages.success(request, f"Job {job.name} submitted to queue {job.queue.name}.")
                _shape_warning(request, job, [f.role() for f in roles.forms], data)
                return redirect("frontend:job-detail", pk=job.pk)
    else:
        team, queue = _initial_team_queue(request, kwargs)
        form = JobForm(initial={"team": team, "queue": queue}, **kwargs)
        roles = RoleFormSet(prefix="roles", form_kwargs={"flavors": flavors, "tiers": kwargs.get("tiers", ())})
    return render(request, "frontend/job_form.html", {
        "form": form, "roles": roles, "queue_teams": dict(kwargs["queues"]), FORM_TOKEN: new_form_token(),
    })  # an invalid form comes back with 200, like Django's FormView (a 400 page is a console error)


def _initial_team_queue(request, kwargs: dict) -> tuple[str, str]:
    """The team and queue the empty form starts with: `?team=` / `?queue=` when the user may submit there,
    else the only team, else the team and queue of the user's last submitted job (a user in several teams
    mostly submits where they did last); the queue defaults to the team's first open leaf queue."""
    teams, queues = kwargs["teams"], kwargs["queues"]
    team, queue = request.GET.get("team", ""), request.GET.get("queue", "")
    if team not in teams:
        team = ""
    if (queue, team or dict(queues).get(queue)) not in queues:
        queue = ""
    if not team and queue:
        team = dict(queues)[queue]
    if not team:
        if len(teams) == 1:
            team = teams[0]
        else:
            last = (Job.objects.filter(submitter=request.user, team__name__in=teams)
                    .order_by("-id").values_list("team__name", "queue__name").first())
            if last:
                team, queue = last[0], (last[1] if (last[1], last[0]) in queues else "")
    if not queue:
        queue = next((q for q, t in queues if t == team), "")
    return team, queue


def _member_flavors() -> list[str]:
    """On a manager (no nodes of its own): the GPU flavors of the member clusters at their last sync."""
    from gpuplatform.models import MemberCluster

    return sorted({f for s in MemberCluster.objects.values_list("summary", flat=True) for f in (s or {}).get("flavors", {})})


def _submit_federated(request, form, roles, team, data: dict, minutes):
    """The form on a federation manager: the same fields as a POST /api/v1/jobs/ body, submitted through
    federation.manager.submit_as (the service the REST front door uses). Returns a redirect to the job's
    row on /federation/, or None with the service's errors put on the form."""
    body = {"name": data["name"], "queue": data["queue"], "team": team.slug,
            "roles": [{k: v for k, v in f.role().items() if v not in (None, "")} for f in roles.forms],
            "priority": data["priority"], "preemptible": data["preemptible"], "topology_mode": data["topology_mode"],
            "interruptible": data.get("interruptible") or False, "highest_tier": data.get("highest_tier"), "preferred_tier": data.get("preferred_tier"),
            "time_limit_seconds": minutes * 60 if minutes else None, "command": data["command"], "env": data["env"],
            "working_dir": data.get("working_dir") or "", "image": data.get("image") or "",
            "max_restarts": data.get("max_restarts") or 0, "completion_role": data.get("completion_role") or "",
            "numa": data.get("numa") or "prefer", "migratable": data.get("migratable") or False,
            "min_run_before_move_seconds": (data.get("min_run_before_move_minutes") or 0) * 60,
            "checkpoint_grace_seconds": data.get("checkpoint_grace_seconds")}
    body = {k: v for k, v in body.items() if v is not None}
    try:
        job = submit_as(user=request.user, body=body)
    except services.ValidationError as exc:
        apply_service_errors(exc.errors, form, roles)
        return None
    request.form_created = True
    messages.success(request, f"Job {job.name} submitted to the federation (queue {job.queue}); the dispatcher "
                              f"places it on a member cluster.")
    return redirect(reverse("federation") + f"#fed-job-{job.pk}")


@login_required
@require_POST
def job_cancel(request, pk: int):
    """The job page's "Cancel job" button. On a federation manager (no local jobs) pk is a federated job's, as
    on /jobs/<pk>/ and /api/v1/jobs/<pk>/cancel/: the Cancel button of its row on /federation/ posts here."""
    if is_manager():
        return _federated_job_cancel(request, pk)
    job = queries.job_detail(request.user, pk)
    if job is None:
        raise Http404("No such job, or not one of your teams' jobs.")
    if not can_act(request.user, job):
        raise PermissionDenied("Only members and admins of the job's team may cancel it.")
    try:
        services.cancel_job(job, actor=request.user, reason=f"cancelled in the browser by {request.user}")
    except services.ValidationError as exc:
        messages.error(request, "; ".join(exc.errors.values()))
    else:
        messages.success(request, f"Job {job.name} cancelled.")
    return redirect("frontend:job-detail", pk=job.pk)


def _federated_job_cancel(request, pk: int):
    """Cancel a federated job from the federation page: the API's rule (members and admins of its team,
    access.can_submit) and the API's service (federation.manager.cancel_federated_job, which stops the
    worker's copy too), then back to the job's row with a message."""
    from gpuplatform.federation.manager import cancel_federated_job, visible_federated_jobs

    job = visible_federated_jobs(request.user).filter(pk=pk).first()
    if job is None:
        raise Http404("No such federated job, or not one of your teams' jobs.")
    if not can_act(request.user, job):
        raise PermissionDenied("Only members and admins of the job's team may cancel it.")
    try:
        cancel_federated_job(job, actor=request.user, reason=f"cancelled in the browser by {request.user}")
    except services.ValidationError as exc:
        messages.error(request, "; ".join(str(v) for v in exc.errors.values()))
    else:
        messages.success(request, f"Job {job.name} cancelled; its copy on the member cluster is stopped too.")
    return redirect(reverse("federation") + f"#fed-job-{job.pk}")


def _shape_warning(request, job, roles: list[dict], data: dict) -> None:
    """Shape steering after a submit: a role whose tasks strand GPUs on its nodes gets the nearest shape that
    packs, with the estimated start of both (scheduling/advice.shape_check), as a warning on the next page."""
    from gpuplatform.scheduling.advice import shape_check

    def when(a, key):
        value = a["estimated_start"][key]
        if value is None:
            return f"unknown ({a['no_estimate'][key]})"
        return "now" if value == "now" else datetime.fromtimestamp(float(value), tz=dt_timezone.utc).strftime("%H:%M UTC")

    for a in shape_check(roles=roles, queue=job.queue.name, topology_mode=data["topology_mode"],
                         highest_tier=data.get("highest_tier")):
        s = a["suggested"]
        messages.warning(request, f"Shape: role {a['role']}: {a['message']}. Estimated start as asked: "
                                  f"{when(a, 'asked')}; as {s['tasks']} x {s['gpus_per_task']}: "
                                  f"{when(a, 'suggested')}.")


@login_required
@require_POST
def fragmentation_move(request):
    """The advisor's button: ask the listed jobs to checkpoint and move for a blocked job (platform admins;
    services.request_moves, audited)."""
    if not access.is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins may move other teams' jobs.")
    try:
        beneficiary = int(request.POST.get("beneficiary", ""))
        jobs = [int(j) for j in request.POST.getlist("jobs")]
    except ValueError:
        messages.error(request, "beneficiary and jobs must be job ids")
        return redirect("frontend:fragmentation")
    try:
        out = services.request_moves(beneficiary=beneficiary, jobs=jobs, actor=request.user)
    except services.ValidationError as exc:
        messages.error(request, "; ".join(exc.errors.values()))
    else:
        messages.success(request, f"{len(out['moves'])} job(s) asked to checkpoint and move; {out['domain']} is "
                                  f"held for job {beneficiary}.")
    return redirect("frontend:fragmentation")


def can_act(user, job) -> bool:
    return access.can_submit(user, job.team_id)


@require_POST  # a wrong method is a 405 before the session and CSRF checks (new-user trial 12, F12)
@login_required_json
def job_estimate(request):
    """The submit form's "would start in about ..." (issue #15): the job as filled in so far, as a
    hypothetical submission to the live cluster's what-if (gpuplatform.scheduling.forecast.what_if_live).
    Nothing is written. JSON {"text", "estimated_start", "estimated_start_p90", "no_estimate"}; a field that
    cannot be read yet is a 400 {"errors": {field: message}}."""
    from django.http import JsonResponse

    from frontend.templatetags.forecast import estimate_words
    from gpuplatform import clock
    from gpuplatform.scheduling.forecast import WhatIfDenied, what_if_live
    from scheduler.forecast.whatif import WhatIfError

    post = request.POST
    errors = {key: REPEATED for key, values in post.lists() if len(values) > 1}  # the form's rule (F14, trial 14)

    def number(name, lo, hi, required=True):
        raw = (post.get(name) or "").strip()
        if not raw:
            if required:
                errors[name] = "required"
            return None
        try:
            value = int(raw)
        except ValueError:
            errors[name] = "must be a whole number"
            return None
        if not lo <= value <= hi:
            errors[name] = f"must be between {lo} and {hi}"
        return value

    queue = (post.get("queue") or "").strip()
    if not queue:
        errors["queue"] = "choose a queue"
    try:
        total = min(16, int(post.get("roles-TOTAL_FORMS") or 1))
    except ValueError:
        total = 1
    roles = []
    for i in range(total):
        tasks = number(f"roles-{i}-tasks", 1, 4096)
        gpus = number(f"roles-{i}-gpus_per_task", 0, 64)
        min_av = number(f"roles-{i}-min_available", 1, 4096, required=False)
        flavor = (post.get(f"roles-{i}-flavor") or "").strip()
        role = {"name": post.get(f"roles-{i}-name") or f"role{i}", "tasks": tasks, "gpus_per_task": gpus,
                "min_available": min_av, "flavors": [f for f in flavor.split("|") if f]}
        # GPU sharing, as the form submits it (job_rules.check_roles judges it, in what_if_live)
        fraction = (post.get(f"roles-{i}-gpu_fraction") or "").strip()
        if fraction:
            try:
                role["gpu_fraction"] = float(fraction)
            except ValueError:
                errors[f"roles-{i}-gpu_fraction"] = "must be a number between 0 and 1, e.g. 0.5"
        memory = number(f"roles-{i}-gpu_memory_mib", 1, 10**7, required=False)
        if memory:
            role["gpu_memory_mib"] = memory
        profile = (post.get(f"roles-{i}-mig_profile") or "").strip()
        if profile:
            role["mig_profile"] = profile
            role["mig_count"] = number(f"roles-{i}-mig_count", 1, 64, required=False)
        roles.append(role)
    priority = number("priority", -2**31, 2**31 - 1, required=False) or 0
    minutes = number("time_limit_minutes", 1, 10**6, required=False)
    tier = number("highest_tier", 1, 16, required=False)
    if errors:
        return JsonResponse({"errors": errors}, status=400)
    change = {"kind": "submit", "id": "this job", "queue": queue, "roles": roles, "priority": priority,
              "time_limit": minutes * 60 if minutes else None, "topology_mode": post.get("topology_mode") or "none",
              "highest_tier": tier, "preemptible": bool(post.get("preemptible")),
              "interruptible": bool(post.get("interruptible"))}
    try:
        answer = what_if_live(request.user, [change])
    except WhatIfDenied as exc:
        return JsonResponse({"errors": {"queue": exc.message}}, status=403)
    except WhatIfError as exc:
        # the form's own field names (new-user trial 14, F1 / F13: a time limit past 366 days was filed under
        # "time_limit", a field the form does not have): time_limit_minutes, roles-0-gpu_fraction, roles-1-flavor
        # (the what-if's roles[1].flavors: the form's flavor box, "A|B")
        field = "time_limit_minutes" if exc.field == "time_limit" else re.sub(
            r"^roles\[(\d+)\]\.(?:(flavor)s$)?", r"roles-\1-\2", exc.field)
        return JsonResponse({"errors": {field: exc.message}}, status=400)
    mine = next(j for j in answer["jobs"] if j["hypothetical"])["after"]
    parse = datetime.fromisoformat
    start = parse(mine["estimated_start"]) if mine["estimated_start"] else None
    p90 = parse(mine["estimated_start_p90"]) if mine["estimated_start_p90"] else None
    words = estimate_words(start, p90, mine["no_estimate"] or "", clock.now(), parse(answer["now"]))
    text = words if start is None else f"would start {words}"
    # the running jobs it would stop to start (its reclaims or preemptions: new-user trial 22, F3), other teams'
    # counted, never named (the what-if's hidden_evictions_for_change)
    stops = [e for e in answer["evictions"] if e["beneficiary"] == change["id"]]
    count = len(stops) + answer["hidden_evictions_for_change"]
    if count:
        rules = sorted({e["rule"] for e in stops}) or ["reclaim or preemption"]
        others = answer["hidden_evictions_for_change"]
        text += (f"; it would stop {count} running job{'s' if count != 1 else ''} to start ({', '.join(rules)}"
                 + (f"; {others} of other teams" if others else "") + "): they are requeued")
    return JsonResponse({"text": text, "stops": count, **mine})
