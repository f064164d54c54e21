"""django-filter FilterSets, one per resource (query parameters of the list endpoints)."""
import re
from datetime import datetime, timezone as dt_timezone

import django_filters as df
from django import forms
from django.contrib.auth import get_user_model
from django_filters.widgets import BooleanWidget
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter

from ..inputs import blank_params, whole_number
from ..job_rules import MAX_TIER
from ..models import (
    ClusterSample, DiagnosisRule, Domain, Event, HealthRule, Job, Membership, Node, Queue, Quota, SchedulerCycle, Team,
)


# The times a query parameter may name (since / until / submitted_after ...): every endpoint refuses one outside
# with a 400 naming the parameter and this range, instead of a 500 from date arithmetic near year 1 / 9999 or
# a window changed without a word (new-user trial 11, F3).
TIME_MIN = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
TIME_MAX = datetime(9999, 1, 1, tzinfo=dt_timezone.utc)
TIME_RANGE = "from 1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z"
TIME_OUT_OF_RANGE = f"date-time out of range: must be {TIME_RANGE}"


def time_in_range(value: datetime) -> datetime:
    """`value` (aware; naive is read as UTC) in UTC; ValueError(TIME_OUT_OF_RANGE) outside TIME_MIN..TIME_MAX."""
    try:
        value = (value if value.tzinfo else value.replace(tzinfo=dt_timezone.utc)).astimezone(dt_timezone.utc)
    except (OverflowError, ValueError):
        raise ValueError(TIME_OUT_OF_RANGE) from None
    if not TIME_MIN <= value <= TIME_MAX:
        raise ValueError(TIME_OUT_OF_RANGE)
    return value


_BEYOND_YEAR_9999 = re.compile(r"^\s*[+-]?\d{5,}-\d")  # an ISO 8601 expanded year (99999-01-01): no datetime


def beyond_year_9999(raw) -> bool:
    """A date-time written with a year of five digits or more, which Python cannot read: outside TIME_RANGE, and
    said so (new-user trial 14, F22: `?since=99999-01-01` got "Enter a valid date/time.", `0001-01-01` the range)."""
    return isinstance(raw, str) and bool(_BEYOND_YEAR_9999.match(raw))


def time_param(request, name: str) -> datetime | None:
    """The query parameter `name` as an ISO 8601 time in UTC (None when absent); a ValidationError naming it when it
    is not one (an empty value included: inputs.EMPTY_MESSAGE, refused before any view) or is outside TIME_RANGE. A
    time without an offset is UTC."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        if beyond_year_9999(raw):
            raise ValidationError({name: [TIME_OUT_OF_RANGE]}) from None
        raise ValidationError({name: ["must be an ISO 8601 time, e.g. 2026-12-01T00:00:00Z"]}) from None
    try:
        return time_in_range(t)
    except ValueError as exc:
        raise ValidationError({name: [str(exc)]}) from None


class UtcDateTimeField(df.fields.IsoDateTimeField):
    """IsoDateTimeField in UTC within TIME_RANGE: the form error is keyed by the parameter's name."""

    def clean(self, value):
        if beyond_year_9999(value):
            raise forms.ValidationError(TIME_OUT_OF_RANGE)
        value = super().clean(value)
        if value is not None:
            try:
                value = time_in_range(value)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value


class UtcDateTimeFilter(df.IsoDateTimeFilter):
    """ISO 8601 date-time, compared in UTC: PostgreSQL refuses UTC offsets beyond +-15:59, which ISO 8601
    (and Python) allow, so the value is normalised before it reaches the database; outside TIME_RANGE it is a
    400 naming the parameter and the range (UtcDateTimeField)."""

    field_class = UtcDateTimeField


class StrictBooleanWidget(BooleanWidget):
    """true / false / 1 / 0 (any case) as BooleanWidget; any other value given is passed on for the field to
    refuse (BooleanWidget turns it into None: `?never_fits=maybe` silently filtered nothing). Left out: None."""

    def value_from_datadict(self, data, files, name):
        value = data.get(name)
        if isinstance(value, str) and value.lower() not in ("true", "false", "1", "0"):
            return value
        return super().value_from_datadict(data, files, name)


class StrictBooleanField(forms.NullBooleanField):
    def to_python(self, value):
        if isinstance(value, str):
            raise forms.ValidationError("must be true or false (or 1 / 0)")
        return super().to_python(value)


class StrictBooleanFilter(df.BooleanFilter):
    """A boolean query parameter that refuses a value other than true / false / 1 / 0 (a 400 naming it)."""
    field_class = StrictBooleanField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", StrictBooleanWidget)
        super().__init__(*args, **kwargs)


class CharInFilter(df.BaseInFilter, df.CharFilter):
    """`?kind__in=a,b`"""


class NamedFilter(df.CharFilter):
    """A filter by a public name (a team's slug, a queue's name): one that names nothing is a 400
    `{"<param>": ["unknown team 'nope'"]}` (the body fields' wording), not an empty list that reads as "none
    match" (new-user trial 8, F10; docs/api.md: an unknown value is a 400 naming it)."""

    def __init__(self, *args, model=None, lookup: str = "name", what: str = "object", hint: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.named_model, self.named_lookup, self.what = model, lookup, what  # (the filterset sets .model)
        self.hint = hint

    def filter(self, qs, value):
        if value not in (None, "") and self._may_tell():
            error = unknown_name(self.named_model, self.named_lookup, value, self.what, self.hint)
            if error:
                raise ValidationError({self.field_name.split("__")[0]: [error]})
        return super().filter(qs, value)

    def _may_tell(self) -> bool:
        """Whether the caller may learn that the name exists: always, but for a user name asked by a non-admin
        (a 400 for one that does not exist would tell who has an account; theirs just filters to nothing)."""
        if self.named_model is not get_user_model():
            return True
        request = getattr(self.parent, "request", None)
        return bool(request is not None and getattr(request.user, "is_staff", False))


class TeamFilter(NamedFilter):
    """`?team=`: a team's slug or name, resolved to one team as everywhere (queries.find_team: the slug first);
    one that names no team is a 400 `{"team": ["unknown team 'nope'"]}`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("field_name", "team")
        kwargs.setdefault("help_text", "team slug or name")
        super().__init__(*args, model=Team, lookup="slug", what="team", **kwargs)

    def filter(self, qs, value):
        if value in (None, ""):
            return qs
        from ..queries import find_team
        team = find_team(value)
        if team is None:
            raise ValidationError({"team": [f"unknown team {value[:60]!r}"]})
        return qs.filter(**{f"{self.field_name}_id": team.pk})


def unknown_name(model, lookup: str, value: str, what: str, hint: str = "") -> str | None:
    """The rule a filter value breaks when it names no `model` row (`lookup`=value), as NamedFilter and the
    pages' filters word it: "unknown team 'nope'" (+ `hint`); None when some row has it."""
    if model.objects.filter(**{lookup: value}).exists():
        return None
    return f"unknown {what} {value[:60]!r}{hint}"


class StrictIntegerField(forms.IntegerField):
    """forms.IntegerField read by the one parser of numbers in query parameters (inputs.whole_number): ASCII digits
    and a leading '-' (a number below min_value is then its `min_value` message). Django's field also took '1.0',
    ' 1', '1_0' and other scripts' digits (trial 20, F4): each is its `invalid` message."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        number = whole_number(value, negative=True) if isinstance(value, str) else None
        if number is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return number


class WholeNumberFilter(df.Filter):
    """A whole number from `min_value` to `max_value` (a tier, a cycle number): a word, a fraction or a number
    outside is a 400 naming the parameter and the range. django-filter's NumberFilter reads a decimal, which the
    integer column's lookup truncates: `?tier=1.5` listed the tier-1 domains, and `?cycle=-1` read as a cycle
    that cannot be rather than a mistake (review 19c). ASCII digits only (StrictIntegerField): `?tier=1.0` too is
    that 400."""

    field_class = StrictIntegerField

    def __init__(self, *args, what: str, min_value: int, max_value: int, **kwargs):
        rule = f"a {what} is a whole number from {min_value} to {max_value}"
        kwargs.update(min_value=min_value, max_value=max_value,
                      error_messages={"invalid": rule, "min_value": rule, "max_value": rule})
        super().__init__(*args, **kwargs)


# A scheduler cycle's number (SchedulerCycle.number, Event.cycle, ClusterSample.cycle: PositiveIntegerField)
CYCLE_NUMBER_MAX = 2**31 - 1


class TeamFilterSet(df.FilterSet):
    name = df.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Team
        fields = ["slug", "name"]


class MembershipFilterSet(df.FilterSet):
    team = TeamFilter()
    user = NamedFilter(field_name="user__username", model=get_user_model(), lookup="username", what="user",
                       help_text="username")

    class Meta:
        model = Membership
        fields = ["team", "user", "role"]


class QueueFilterSet(df.FilterSet):
    parent = NamedFilter(field_name="parent__name", model=Queue, what="queue", help_text="parent queue name")
    team = TeamFilter()
    root = StrictBooleanFilter(field_name="parent", lookup_expr="isnull", help_text="only root queues")

    class Meta:
        model = Queue
        fields = ["name", "parent", "team", "state", "root"]


class QuotaFilterSet(df.FilterSet):
    queue = NamedFilter(field_name="queue__name", model=Queue, what="queue", help_text="queue name")

    class Meta:
        model = Quota
        fields = ["queue", "flavor"]


class DomainFilterSet(df.FilterSet):
    parent = NamedFilter(field_name="parent__name", model=Domain, what="domain", help_text="parent domain name")
    tier = WholeNumberFilter(what="tier", min_value=1, max_value=MAX_TIER, help_text="1 = NVLink, 2 = leaf, 3 = spine")

    class Meta:
        model = Domain
        fields = ["name", "tier", "parent"]


class NodeFilterSet(df.FilterSet):
    domain = NamedFilter(field_name="domain__name", model=Domain, what="domain", help_text="lowest-tier domain name")
    flavor = NamedFilter(model=Node, lookup="flavor", what="flavor", hint=": no node has it", help_text="GPU model")

    class Meta:
        model = Node
        fields = ["name", "flavor", "state", "domain"]


class _ChoicesListedField(forms.MultipleChoiceField):
    """A multiple-choice query parameter: an unknown value is a 400 listing the choices (new-user trial 12, F7:
    "Select a valid choice. bogus is not one of the available choices."). An empty one (`?state=`,
    `?state=pending&state=`) is refused before any view as every empty parameter is (inputs.EMPTY_MESSAGE; it
    was dropped, so `?state=` listed every job)."""

    def validate(self, value):
        for item in value:
            if not self.valid_value(item):
                raise forms.ValidationError(f"unknown {self.label or 'value'} {item!r}; one of: "
                                            + ", ".join(str(k) for k, _ in self.choices), code="invalid_choice")


class StateFilter(df.MultipleChoiceFilter):
    field_class = _ChoicesListedField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label", "state")
        super().__init__(*args, **kwargs)


class JobStateFilter(StateFilter):
    """The jobs' `state`: a Job.State, or a stopping job's word as gpuctl shows it (`cancelling`, `stopping`:
    Job.STOPPING_WORDS; new-user trial 14, F12: `--state cancelling` was refused)."""

    def filter(self, qs, value):
        if not value:
            return qs
        from ..queries import job_state_q
        return qs.filter(job_state_q(value)).distinct() if self.distinct else qs.filter(job_state_q(value))


JOB_STATE_CHOICES = [*Job.State.choices, ("cancelling", "cancelling (preempting toward cancelled)"),
                     ("stopping", "stopping (preempting toward failed, succeeded or a restart)")]


class JobFilterSet(df.FilterSet):
    team = TeamFilter()
    queue = NamedFilter(field_name="queue__name", model=Queue, what="queue", help_text="queue name")
    submitter = NamedFilter(field_name="submitter__username", model=get_user_model(), lookup="username",
                            what="user", help_text="username")
    state = JobStateFilter(choices=JOB_STATE_CHOICES, help_text="repeat for several states; cancelling / stopping: a "
                                                                 "preempting job that will end cancelled / otherwise")
    submitted_after = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    name = df.CharFilter(lookup_expr="exact", help_text="the job's name, exact (as external_id)")
    name__contains = df.CharFilter(field_name="name", lookup_expr="icontains",
                                   help_text="a substring of the job's name, case-insensitive")
    never_fits = StrictBooleanFilter(help_text="true: only jobs that can never fit; false: only the others")

    class Meta:
        model = Job
        fields = ["team", "queue", "submitter", "state", "never_fits", "name", "name__contains", "external_id"]


def id_range_messages(what: str) -> dict[str, str]:
    """The API's words for an id out of a BigAutoField's range (1 .. 2**63 - 1): IdFilter's, and a request body's
    field naming an object by id (the what-if's changes[i].job), so a too-large id reads the same everywhere."""
    return {"min_value": f"a {what} id is 1 or more", "max_value": f"no {what} has an id that large"}


class IdFilter(df.Filter):
    """An object's id: a whole number from 1 (a BigAutoField's range). A word is "an id is a whole number",
    not django-filter's "Select a valid choice. That choice is not one of the available choices." (new-user
    trial 8, F14); an id with no visible object matches nothing, as an unknown name does. ASCII digits only
    (StrictIntegerField)."""

    field_class = StrictIntegerField

    def __init__(self, *args, what: str = "object", **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**63 - 1)
        kwargs.setdefault("error_messages", {"invalid": f"a {what} id is a whole number", **id_range_messages(what)})
        super().__init__(*args, **kwargs)


class EventFilterSet(df.FilterSet):
    job = IdFilter(field_name="job_id", what="job", help_text="job id")
    # a kind is not a name of a row: a kind that has not happened yet (no eviction so far) filters to nothing
    kind = df.CharFilter(help_text="event kind, e.g. submitted, admitted, quota_changed, cordoned; one that no "
                                   "event has yet lists nothing")
    kind__in = CharInFilter(field_name="kind", help_text="several kinds, comma separated")
    actor = NamedFilter(field_name="actor__username", model=get_user_model(), lookup="username", what="user",
                        help_text="username")
    queue = NamedFilter(field_name="queue__name", model=Queue, what="queue", help_text="queue name")
    node = NamedFilter(field_name="node__name", model=Node, what="node", help_text="node name")
    since = UtcDateTimeFilter(field_name="time", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="time", lookup_expr="lt")
    cycle = WholeNumberFilter(what="cycle number", min_value=0, max_value=CYCLE_NUMBER_MAX,
                              help_text="the scheduler cycle that wrote it")

    class Meta:
        model = Event
        fields = ["kind", "kind__in", "job", "queue", "node", "actor", "cycle", "since", "until"]


class SchedulerCycleFilterSet(df.FilterSet):
    since = UtcDateTimeFilter(field_name="started_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="started_at", lookup_expr="lt")
    failed = StrictBooleanFilter(method="filter_failed", help_text="only cycles that raised (true) or not (false)")

    class Meta:
        model = SchedulerCycle
        fields = ["since", "until", "failed"]

    def filter_failed(self, qs, name, value):
        return qs.exclude(error="") if value else qs.filter(error="")


class _RuleFilterSet(df.FilterSet):
    """The diagnosis and health rules' lists: `enabled` is true / false / 1 / 0, anything else a 400 naming it
    (the rules' filterset_fields gave django-filter's BooleanFilter, which read `?enabled=maybe` or `?enabled=yes`
    as no filter at all and listed every rule)."""

    enabled = StrictBooleanFilter(help_text="true: the rules in use; false: the ones switched off")


class DiagnosisRuleFilterSet(_RuleFilterSet):
    class Meta:
        model = DiagnosisRule
        fields = ["enabled"]


class HealthRuleFilterSet(_RuleFilterSet):
    class Meta:
        model = HealthRule
        fields = ["enabled"]


class ClusterSampleFilterSet(df.FilterSet):
    since = UtcDateTimeFilter(field_name="time", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="time", lookup_expr="lt")
    cycle = WholeNumberFilter(what="cycle number", min_value=0, max_value=CYCLE_NUMBER_MAX,
                              help_text="the scheduler cycle that took it")

    class Meta:
        model = ClusterSample
        fields = ["since", "until", "cycle"]


class KnownQueryParams:
    """A filter backend (first in DEFAULT_FILTER_BACKENDS) that refuses, on a list endpoint, a query parameter
    the list does not read: `GET /api/v1/jobs/?foo=bar` is a 400 `{"foo": ["unknown query parameter; this
    list takes: ..."]}`, never the unfiltered list a typo'd filter would silently give.

    Known: the view's filterset's filters, the ordering parameter, the paginator's (limit, offset, cursor,
    ordering), `format` (DRF's format override) and the view's own `extra_query_params`. Only `list` actions
    of views with a filterset are checked: a view that reads its parameters itself (get_queryset) declares
    nothing here and is left alone. A parameter sent empty (or only white space) is a 400 naming it too
    (inputs.blank_params: the middleware's rule, kept here for a list called without it)."""

    def filter_queryset(self, request, queryset, view):
        if getattr(view, "action", None) != "list":
            return queryset
        known = self.known(request, queryset, view)
        if known is None:
            return queryset
        multi = self.multi_valued(queryset, view)
        _refuse(request.query_params, known, multi, "list")
        # (InputGuardMiddleware refuses them first on every request; this keeps the rule for a view called without it)
        blank = blank_params(request.query_params)
        if blank:
            raise ValidationError(blank)
        return queryset

    @staticmethod
    def multi_valued(queryset, view) -> set[str]:
        """The parameters that may be repeated: the filterset's multiple-choice filters (`?state=a&state=b`,
        documented "repeat for several states"); any other given twice is a 400 (repeated_params)."""
        from django_filters.rest_framework import DjangoFilterBackend

        names = set()
        for backend in view.filter_backends:
            if isinstance(backend, type) and issubclass(backend, DjangoFilterBackend):
                filterset = backend().get_filterset_class(view, queryset)
                if filterset is not None:
                    names |= {n for n, f in filterset.base_filters.items() if isinstance(f, df.MultipleChoiceFilter)}
        return names

    def get_schema_operation_parameters(self, view) -> list:
        return []  # it adds no parameter; the other backends document theirs

    @staticmethod
    def known(request, queryset, view) -> set[str] | None:
        from django_filters.rest_framework import DjangoFilterBackend
        from rest_framework.filters import OrderingFilter
        from rest_framework.settings import api_settings

        names = {api_settings.URL_FORMAT_OVERRIDE} | set(getattr(view, "extra_query_params", ()))
        has_filterset = False
        for backend in view.filter_backends:
            if isinstance(backend, type) and issubclass(backend, DjangoFilterBackend):
                filterset = backend().get_filterset_class(view, queryset)
                if filterset is not None:
                    has_filterset = True
                    names |= set(filterset.base_filters)
            elif isinstance(backend, type) and issubclass(backend, OrderingFilter):
                names.add(backend.ordering_param)
        if not has_filterset:
            return None
        paginator = getattr(view, "paginator", None)
        for attr in ("limit_query_param", "offset_query_param", "cursor_query_param", "ordering_query_param",
                     "page_query_param", "page_size_query_param"):
            if getattr(paginator, attr, None):
                names.add(getattr(paginator, attr))
        return names


class StrictOrderingFilter(OrderingFilter):
    """DRF's OrderingFilter (the last of DEFAULT_FILTER_BACKENDS) that refuses, on a list, an `ordering` it would not
    follow as written (ordering_specs): DRF drops a field the list does not order by without a word, so
    `?ordering=nope` (or `?ordering=-nmae`) gave the default order as though it had been followed, and keeps the
    first of a field named twice (`?ordering=id,-id`: ascending). Only `list` actions are checked, as
    KnownQueryParams does: a detail read filters its queryset too but has no order."""

    def filter_queryset(self, request, queryset, view):
        if getattr(view, "action", None) == "list":
            self.refuse_unknown(request, queryset, view)
        return super().filter_queryset(request, queryset, view)

    def refuse_unknown(self, request, queryset, view) -> None:
        raw = request.query_params.get(self.ordering_param)
        if raw is not None:
            allowed = [name for name, _ in self.get_valid_fields(queryset, view, {"request": request})]
            ordering_specs(raw, allowed, self.ordering_param)


def ordering_specs(raw: str, allowed, param: str = "ordering") -> list[str]:
    """The one reading of an `ordering` (the offset lists' StrictOrderingFilter, the keyset lists' pagination): a
    comma list of parts, each one of `allowed` with or without one leading '-', each field once. Raises a
    ValidationError naming `param`: for the parts that are not such a field (`?ordering=nope`; a blank part,
    `?ordering=name,`, names none: "cannot order by ... choose from ..."), and for a field given twice in either
    direction (`?ordering=id,-id`: "'id' is given more than once ...": which would win is not the client's to
    guess). Returns the parts, stripped."""
    specs = [p.strip() for p in raw.split(",")]
    fields = [s[1:] if s.startswith("-") else s for s in specs]
    bad = [s for s, f in zip(specs, fields) if f not in allowed]
    if bad:
        raise ValidationError({param: [ordering_error(bad, allowed)]})
    twice = list(dict.fromkeys(f for i, f in enumerate(fields) if f in fields[:i]))
    if twice:
        shown = ", ".join(repr(f) for f in twice)
        raise ValidationError({param: [f"{shown} {'is' if len(twice) == 1 else 'are'} given more than once; order "
                                       f"by each field once, ascending or with '-' descending"]})
    return specs


def ordering_error(bad, allowed) -> str:
    """The one wording of an ordering a list does not take: the parts refused (quoted, so a blank one shows) and
    the fields it orders by."""
    shown = ", ".join(repr(part[:60]) for part in bad[:10])
    return f"cannot order by {shown}; choose from {', '.join(sorted(allowed))} ('-' for descending)"


REPEATED = "given more than once: send it once"


def repeated_params(query, multi=()) -> dict[str, list[str]]:
    """{name: [message]} for each parameter of `query` (a QueryDict) given more than once that is not in
    `multi` (the documented multi-valued ones): `?limit=1&limit=2` or `?state=running&state=pending` on a
    single-valued state would otherwise keep one of them silently (new-user trial 7, F3)."""
    return {name: [REPEATED] for name in sorted(query) if name not in multi and len(query.getlist(name)) > 1}


def refuse_unknown_params(request, known, multi=()) -> None:
    """For a view that reads its query parameters itself (an APIView, or a page's JSON endpoint: `request`
    may be a plain Django request): a parameter outside `known` is a 400 naming it, as KnownQueryParams
    answers on a list (`?start=` where the view reads `since` must not give the default window silently),
    and so is one given more than once unless it is in `multi`. `format` (DRF's format override) is always
    known."""
    from rest_framework.settings import api_settings

    query = getattr(request, "query_params", None)
    _refuse(request.GET if query is None else query, set(known) | {api_settings.URL_FORMAT_OVERRIDE}, multi,
            "endpoint")


def _refuse(query, allowed: set, multi, what: str) -> None:
    """Raise ValidationError {param: [message]} for each parameter of `query` outside `allowed` and each one
    given twice that is not in `multi` (KnownQueryParams on a list, refuse_unknown_params elsewhere)."""
    errors = repeated_params(query, multi)
    unknown = sorted(set(query) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed))
        errors.update({name: [f"unknown query parameter; this {what} takes: {takes}"] for name in unknown})
    if errors:
        raise ValidationError(errors)
