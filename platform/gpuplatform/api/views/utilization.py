"""GET /api/v1/utilization/: the GPU-hour ledger (gpuplatform/utilization.py, DESIGN section 14)."""
from __future__ import annotations

from datetime import timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import access, clock
from ...models import Node, Queue
from ...queries import find_team
from ..filters import TIME_MIN, TIME_RANGE, refuse_unknown_params, time_param, unknown_name
from ...inputs import blank_params, whole_number
from ...telemetry import idle_allocations
from ...utilization import SCOPES, top_jobs_lost_to_failure, utilization

MAX_WINDOW = timedelta(days=100)
MAX_BINS = 2000
DEFINITION = ("effective utilization = useful / (capacity - down) GPU-hours; useful = allocated to a running task "
              "whose work was kept and not idle")


class UtilizationView(APIView):
    """Where the GPU-hours went, per scope value: `capacity`, the buckets `useful`, `idle_allocated`,
    `lost_to_failure`, `grace_and_startup`, `held`, `free_fragmented`, `free`, `down` (GPU-hours) and
    `effective_utilization` (0..1, null when nothing was up). `?scope=cluster|flavor|queue|team|job`
    (default cluster), `?since=&until=` (ISO 8601, default the last 24 h of the cluster clock, at most 100
    days), filters `?flavor=&queue=&team=`, `?step=` seconds for a series (at most 2,000 bins). Cluster and
    flavor totals are the same for every user (aggregates); platform admins see every team, queue and job,
    others only their teams' (queue / team / job scopes, the queue / team filters, the job lists). `telemetry` false: idle_allocated cannot be measured ("no
    telemetry"), never read its 0 as busy."""

    permission_classes = [IsAuthenticated]

    PARAMS = ("scope", "since", "until", "flavor", "queue", "team", "step")  # any other is a 400 naming it

    @extend_schema(parameters=[OpenApiParameter(p, str, required=False) for p in PARAMS],
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        q = request.query_params
        refuse_unknown_params(request, self.PARAMS)
        # a parameter sent empty is a 400 naming it, as everywhere (inputs.EMPTY_MESSAGE, InputGuardMiddleware first):
        # `?team=` answered the whole cluster (trial 17c, G15), `?since=` the default window (trial 20, F3)
        blank = blank_params(q)
        if blank:
            raise ValidationError(blank)
        scope = q.get("scope") or "cluster"
        if scope not in SCOPES:
            raise ValidationError({"scope": [f"must be one of {', '.join(SCOPES)}"]})
        now = clock.now()
        # Both parsed and range-checked (api.filters.TIME_RANGE) before any arithmetic: the default since
        # (until - 1 day) of until=0001-01-01... was a 500 (new-user trial 11, F3).
        times, errors = {}, {}
        for name in ("since", "until"):  # both named when both are wrong
            try:
                times[name] = time_param(request, name)
            except ValidationError as exc:
                errors.update(exc.detail)
        if errors:
            raise ValidationError(errors)
        since, given_until = times["since"], times["until"]
        until = now if given_until is None else given_until
        if since is None:
            if until - TIME_MIN < timedelta(days=1):
                raise ValidationError({"until": [f"must be at least a day after the start of the range ({TIME_RANGE}) "
                                                 f"without since"]})
            since = until - timedelta(days=1)
        if until <= since:
            raise ValidationError({"until": ["must be after since"]})
        # The ledger ends at the cluster clock (no GPU-hours after now): an until past it is answered up to the clock
        # (the answer's `until` says so); a window that starts at or after the clock has nothing to answer, and
        # was answered with a made-up one-second window ending at since + 1 s.
        if since >= now:  # named on the parameter sent: since, or until when since is its default (trial 16, F8)
            if times["since"] is None:
                raise ValidationError({"until": [f"must be at most a day after the cluster clock ({now.isoformat()}) "
                                                 f"without since (since defaults to until - 1 day): the ledger has no "
                                                 f"GPU-hours after the clock"]})
            raise ValidationError({"since": [f"must be before the cluster clock ({now.isoformat()}): the ledger "
                                             f"has no GPU-hours after it"]})
        if until - since > MAX_WINDOW:
            raise ValidationError({"since": [f"the window may span at most {MAX_WINDOW.days} days"]})
        step = None
        if q.get("step") is not None:
            # whole seconds in ASCII digits (inputs.whole_number): float() took '1e3', ' 60', 'inf' and other
            # scripts' digits (trial 20, F4)
            step = whole_number(q["step"], negative=True)
            if step is None:
                raise ValidationError({"step": ["must be a whole number of seconds"]}) from None
            if not step >= 60 or (until - since).total_seconds() / step > MAX_BINS:
                raise ValidationError({"step": [f"must be >= 60 seconds and give at most {MAX_BINS} bins"]})
        for name in ("flavor", "queue", "team"):
            if "\x00" in (q.get(name) or ""):
                raise ValidationError({name: ["must not contain NUL characters"]})
        # A filter that names nothing is a 400 naming it, the lists' rule (api.filters.NamedFilter, the same
        # words; docs/api.md), not an empty ledger that reads as "zero GPU-hours" (new-user trial 10, F6). Team,
        # queue and flavor names are public (the queues and cluster pages show them all): told to everyone; a
        # queue or team of another team is no error, its rows are just not yours.
        named = {"queue": (Queue, "name", "queue", ""),
                 "flavor": (Node, "flavor", "flavor", ": no node has it")}
        errors = {name: [why] for name, (model, lookup, what, hint) in named.items()
                  if q.get(name) and (why := unknown_name(model, lookup, q[name], what, hint))}
        # `team`: a slug or a name, one team, as every ?team= filter (queries.find_team; trial 18f: `?team=zeta`
        # meant the team NAMED zeta here and the team with slug zeta on the lists)
        team = find_team(q["team"]) if q.get("team") else None
        if q.get("team") and team is None:
            errors["team"] = [f"unknown team {q['team'][:60]!r}"]
        if errors:
            raise ValidationError(errors)
        team_ids = access.visible_team_ids(request.user)
        # cluster / flavor totals are aggregates (no job, team or queue named): the same for everyone, as on
        # the cluster page; queue / team / job scopes, the queue / team filters and the job lists are limited
        # to the user's teams
        limit = team_ids if scope in ("queue", "team", "job") or q.get("queue") or q.get("team") else None
        res = utilization(scope, since, until, team_ids=limit, flavor=q.get("flavor") or None,
                          queue=q.get("queue") or None, team=team.name if team else None, step=step)
        filters = {"flavor": q.get("flavor") or None, "queue": q.get("queue") or None,
                   "team": team.name if team else None}
        # A cluster (or flavor) row filtered by queue / team is the GPU-hours those jobs held, not the cluster's:
        # it is labelled by its filter (trial 19, F18: `?team=alpha` labelled its row "cluster")
        label = _jobs_label(filters) if scope == "cluster" and (filters["queue"] or filters["team"]) else None
        rows = [{scope: label or r["key"], **{k: v for k, v in r.items() if k != "key"}} for r in res["rows"]]
        series = {label or key: v for key, v in res["series"].items()}
        idle = idle_allocations(team_ids, now=now, limit=10)
        return Response({
            "scope": scope, "since": res["since"], "until": res["until"], "telemetry": res["telemetry"],
            "definition": DEFINITION, "filters": filters,
            "capacity_basis": ("the GPU-hours the filtered jobs held" if filters["queue"] or filters["team"]
                               else "every GPU of every node over the window"),
            "results": rows, "series": series,
            "top_idle_allocations": idle,
            "top_lost_to_failure": top_jobs_lost_to_failure(since, until, team_ids=team_ids),
        })


def _jobs_label(filters: dict) -> str:
    """'jobs of team alpha', 'jobs of queue q', 'jobs of team alpha in queue q' (+ ' on flavor H200')."""
    parts = []
    if filters["team"]:
        parts.append(f"team {filters['team']}")
    if filters["queue"]:
        parts.append(("in " if parts else "of ") + f"queue {filters['queue']}")
    text = "jobs " + ("of " + parts[0] if filters["team"] else parts[0]) + "".join(" " + p for p in parts[1:])
    return text + (f" on flavor {filters['flavor']}" if filters["flavor"] else "")
