from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from ... import access, clock as cluster_clock, queries
from ...models import ClusterSample, Event, SchedulerCycle
from ..filters import ClusterSampleFilterSet, EventFilterSet, SchedulerCycleFilterSet, refuse_unknown_params
from ..pagination import KeysetPagination
from ..serializers import ClusterMetricsSerializer, ClusterSampleSerializer, EventSerializer, SchedulerCycleSerializer
from ..serializers.metrics import QueueUsageSerializer


class EventViewSet(viewsets.ReadOnlyModelViewSet):
    """The append-only audit log, newest first: submissions, admissions with placement, preemptions and
    reclaims, quota changes with their actor, node transitions. Platform admins see every event; others
    the events of their teams' jobs and queues, of the platform's inner queues and of nodes."""

    serializer_class = EventSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = EventFilterSet
    ordering_fields = ["time", "id", "kind"]
    pagination_class = KeysetPagination  # a stable order while events are appended
    keyset_ordering = ["-time", "-id"]

    def get_queryset(self):
        qs = Event.objects.select_related("actor", "queue", "node").order_by("-time", "-id")
        team_ids = access.visible_team_ids(self.request.user)
        if team_ids is None:
            return qs
        mine_job = Q(job__team_id__in=team_ids)
        queue_ok = access.queue_visibility(self.request.user, prefix="queue__")
        return qs.filter(mine_job | (Q(job__isnull=True) & Q(queue__isnull=False) & queue_ok)
                         | (Q(job__isnull=True) & Q(queue__isnull=True) & Q(node__isnull=False)))


class SchedulerCycleViewSet(viewsets.ReadOnlyModelViewSet):
    """Scheduling cycles, newest first, by number: wall and cluster time, duration and per-phase timings
    (ms), binds, evictions, pending count, stale decisions dropped, and the error if the cycle raised."""

    serializer_class = SchedulerCycleSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = SchedulerCycleFilterSet
    lookup_field = "number"
    lookup_value_regex = "[0-9]+"
    ordering_fields = ["number", "duration_ms", "started_at"]
    queryset = SchedulerCycle.objects.order_by("-number")


class ClusterMetricsViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Cluster metrics (DESIGN section 6). The list is the time series of per-cycle samples, newest first
    (`?since=&until=`, `?ordering=time` for oldest first); `current/` is the latest sample (the cluster as
    the latest cycle left it, at `sample.time`), the latest cycle and the live usage of the queues you may
    see, read at `queues_time` (the cluster clock now)."""

    serializer_class = ClusterSampleSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = ClusterSampleFilterSet
    ordering_fields = ["time"]
    queryset = ClusterSample.objects.order_by("-time", "-id")

    @extend_schema(responses={200: ClusterMetricsSerializer})
    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None)
    def current(self, request):
        """The latest sample, cycle and queue usage, read in one database snapshot. The sample is the cluster
        as the latest cycle left it (`sample.time`); the queue rows are the live rows (`queues_time`): a job
        submitted or ended after the cycle is counted by the rows only (new-user trial 8, F3: alloc 536 in
        the sample, 535 in the rows' sum, with nothing saying which moment each showed)."""
        refuse_unknown_params(request, ())  # it reads none: ?foo= is a 400 naming it, as on the lists (trial 10, F21)
        with queries.one_snapshot():
            usage = queries.queue_usage(access.visible_team_ids(request.user))
            sample, cycle = queries.latest_cluster_sample(), queries.latest_cycle()
        return Response({
            "sample": ClusterSampleSerializer(sample).data if sample else None,
            "cycle": SchedulerCycleSerializer(cycle).data if cycle else None,
            "queues": QueueUsageSerializer(usage, many=True).data,
            "queues_time": serializers.DateTimeField().to_representation(cluster_clock.now()),
        })
