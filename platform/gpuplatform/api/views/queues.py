from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from ... import access, queries, services
from ...models import Quota
from ..filters import QueueFilterSet, QuotaFilterSet, refuse_unknown_params
from ..idempotency import IdempotentCreateMixin
from ..permissions import IsPlatformAdminOrReadOnly
from ..serializers import QueueCreateSerializer, QueueSerializer, QueueTreeSerializer, QueueUpdateSerializer, QuotaSerializer
from ..serializers.queues import (QueueChangedSerializer, QueueReplaceSerializer, QuotaChangedSerializer,
                                  QuotaUpdateSerializer)
from ...services.queues import quota_note
from .base import IF_MATCH, ETagMixin, atomic


class QueueViewSet(IdempotentCreateMixin, ETagMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                   viewsets.GenericViewSet):
    """The hierarchical queue tree (Volcano Queue / Kueue ClusterQueue + Cohort), by name. Only platform
    admins create, change or delete queues; updates need `If-Match`. Quotas are edited at /quotas/. DELETE
    removes an empty leaf queue with its quotas (services.delete_queue: a queue with child queues or with jobs,
    finished ones included, is a 400 naming the rule, nothing deleted; close it instead)."""

    serializer_class = QueueSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = QueueFilterSet
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    ordering_fields = ["name", "weight", "created_at"]

    def get_queryset(self):
        return (access.visible_queues(self.request.user).select_related("parent", "team")
                .prefetch_related("quotas", "children").order_by("name"))

    @extend_schema(request=QueueCreateSerializer, responses={201: QueueSerializer})
    def create(self, request):
        body = QueueCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        quotas = {}
        for i, q in enumerate(d["quotas"]):
            if q["flavor"] in quotas:
                raise services.ValidationError({f"quotas[{i}].flavor": f"flavor {q['flavor']} listed twice"})
            quotas[q["flavor"]] = (q["guarantee"], q["quota"], q["limit"])
        try:
            queue = services.create_queue(d["name"], parent=d["parent"], team=d["team"], weight=d["weight"],
                                          quotas=quotas, state=d["state"],
                                          preemption_grace_seconds=d["preemption_grace_seconds"], actor=request.user)
        except services.ValidationError as exc:
            # the service names a quota by its flavor (quotas[<flavor>].quota); the body's quotas are a list, so
            # the path is its item's (quotas[0].quota, as roles[0].tasks: new-user trial 12, F9)
            index = {flavor: i for i, flavor in enumerate(quotas)}
            raise services.ValidationError({_quota_path(k, index): v for k, v in exc.errors.items()}) from None
        queue = self.get_queryset().get(pk=queue.pk)
        return self.with_etag(Response(QueueSerializer(queue).data, status=status.HTTP_201_CREATED), queue)

    @extend_schema(request=QueueUpdateSerializer, responses={200: QueueChangedSerializer}, parameters=[IF_MATCH])
    def partial_update(self, request, name=None):
        return self._update(request, QueueUpdateSerializer)

    @extend_schema(request=QueueReplaceSerializer, responses={200: QueueChangedSerializer}, parameters=[IF_MATCH])
    def update(self, request, name=None):
        """PUT: the whole queue (parent, weight, state, preemption_grace_seconds, each required); PATCH changes some."""
        return self._update(request, QueueReplaceSerializer)

    def _update(self, request, serializer_class):
        body = serializer_class(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        with atomic():
            services.lock_queue_tree()  # before the row's lock (services/base.py)
            queue = self.locked_object()
            services.update_queue(queue, parent=d["parent"] if "parent" in d else ..., weight=d.get("weight"),
                                  state=d.get("state"), preemption_grace_seconds=d.get("preemption_grace_seconds"),
                                  actor=request.user)
        queue = self.get_queryset().get(pk=queue.pk)
        data = QueueSerializer(queue).data
        if d.get("state") == "closed" and queue.state == "closing":  # new-user trial 9, F10: say why it differs
            data["state_note"] = ("closed asked, closing given: the queue still has pending or live jobs (its own "
                                  "or its subtree's); it takes no new jobs, nor do the queues below it, and "
                                  "becomes closed when its last job ends")
        return self.with_etag(Response(data), queue)

    @extend_schema(responses={204: None}, description="Delete an empty leaf queue and its quotas (an audited "
                   "queue_deleted event). 400 naming the rule when it has child queues (`children`) or jobs (`jobs`: "
                   "pending, running or finished; close the queue instead).")
    def destroy(self, request, name=None):
        with atomic():
            services.lock_queue_tree()  # its children and jobs read under the lock that creating them takes
            queue = self.get_object()  # after the lock: a queue deleted by a concurrent request is a 404
            services.delete_queue(queue, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: QueueTreeSerializer(many=True)})
    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None)
    def tree(self, request):
        """The queue tree you may see, nested from the roots, with each queue's quotas."""
        refuse_unknown_params(request, ())  # it reads none: ?foo= is a 400 naming it, as on the lists (trial 10, F21)
        tree = queries.queue_tree(self.get_queryset())
        return Response(tree.nest(lambda q: {
            "name": q.name, "team": q.team.slug if q.team else None, "weight": q.weight, "state": q.state,
            "quotas": [{"flavor": x.flavor, "guarantee": x.guarantee, "quota": x.quota, "limit": x.limit}
                       for x in q.quotas.all()]}))


class QuotaViewSet(IdempotentCreateMixin, ETagMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Per queue and GPU flavor: guarantee <= quota <= limit, in GPUs. Only platform admins set quotas;
    changing one needs `If-Match` with the ETag of your last GET (two admins never overwrite silently)."""

    serializer_class = QuotaSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = QuotaFilterSet
    ordering_fields = ["queue__name", "flavor", "quota"]

    def get_queryset(self):
        qs = Quota.objects.select_related("queue").order_by("queue__name", "flavor")
        where = access.queue_visibility(self.request.user, prefix="queue__")
        return qs if where is None else qs.filter(where)

    @extend_schema(request=QuotaSerializer, responses={201: QuotaChangedSerializer})
    def create(self, request):
        body = QuotaSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        row = services.set_quota(d["queue"], d["flavor"], d["guarantee"], d["quota"], d["limit"], actor=request.user,
                                 create=True)
        return self.with_etag(Response(_with_quota_note(row), status=status.HTTP_201_CREATED), row)

    @extend_schema(request=QuotaUpdateSerializer, responses={200: QuotaChangedSerializer}, parameters=[IF_MATCH])
    def update(self, request, pk=None):
        return self._update(request, partial=False)

    @extend_schema(request=QuotaUpdateSerializer, responses={200: QuotaChangedSerializer}, parameters=[IF_MATCH])
    def partial_update(self, request, pk=None):
        return self._update(request, partial=True)

    def _update(self, request, *, partial: bool):
        body = QuotaUpdateSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        with atomic():
            services.lock_queue_tree()  # before the row's lock (services/base.py)
            row = self.locked_object()
            row = services.set_quota(row.queue, row.flavor, d.get("guarantee", row.guarantee), d.get("quota", row.quota),
                                     d["limit"] if "limit" in d else row.limit, actor=request.user,
                                     changed=set(d))
        return self.with_etag(Response(_with_quota_note(row)), row)


def _with_quota_note(row) -> dict:
    """The quota's answer, plus `quota_note` when its queue uses more of the flavor than the quota (or the limit)
    now allows (services.queues.quota_note: accepted, running jobs keep their GPUs; what the engine does then)."""
    data = QuotaSerializer(row).data
    note = quota_note(row)
    if note:
        data["quota_note"] = note
    return data


def _quota_path(key: str, index: dict[str, int]) -> str:
    """'quotas[H100].quota' -> 'quotas[0].quota' when H100 is the body's first quota; any other key as it is."""
    if key.startswith("quotas[") and "]" in key:
        flavor, rest = key[len("quotas["):].split("]", 1)
        if flavor in index:
            return f"quotas[{index[flavor]}]{rest}"
    return key
