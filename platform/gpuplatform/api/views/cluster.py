from django.db import transaction
from django.db.models import Case, Count, F, FloatField, Q, Sum, Value, When
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from scheduler.core.domain_tree import node_domain

from ... import execution, queries, services
from ...models import Domain, Node, NodeAgentScope
from ...services import nodes as nodes_service
from ..filters import DomainFilterSet, NodeFilterSet, refuse_unknown_params
from ..idempotency import IdempotentCreateMixin
from ..permissions import IsNodeAgentForNode, IsPlatformAdminOrReadOnly, node_scope_allows
from ..serializers.cluster import GpuFenceSerializer
from ..serializers import (
    DomainSerializer, DomainTreeSerializer, HeartbeatSerializer, NodeActionSerializer, NodeGpuSharingSerializer,
    NodeRegisterSerializer,
    NodeReportsSerializer, NodeSerializer, NodeSpareSerializer, NodeValidateSerializer, NodeValidationResultSerializer,
)


class DomainViewSet(viewsets.ReadOnlyModelViewSet):
    """Network performance domains (HyperNodes): tier 1 = NVLink / scale-up, 2 = leaf, 3 = spine.
    Readable by every authenticated user; the tree is loaded with `manage.py import_topology`."""

    serializer_class = DomainSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = DomainFilterSet
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    ordering_fields = ["tier", "name"]

    def get_queryset(self):
        return Domain.objects.select_related("parent").annotate(node_count=Count("nodes")).order_by("tier", "name")

    @extend_schema(responses={200: DomainTreeSerializer(many=True)})
    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None)
    def tree(self, request):
        """The whole domain tree, nested from the top tier, with the nodes hanging off each lowest domain. A
        node without a domain is listed as the tier-1 domain it is for placement, "node:<name>", after the
        tree's roots, with `"domainless": true`."""
        refuse_unknown_params(request, ())  # it reads none: ?foo= is a 400 naming it, as on the lists (trial 10, F21)
        tree = queries.domain_tree()
        nodes: dict = {}
        for dom_id, name in Node.objects.values_list("domain_id", "name").order_by("name"):
            nodes.setdefault(dom_id, []).append(name)
        roots = sorted(tree.roots(), key=lambda k: (-tree.rows[k][2], tree.rows[k][1]))
        out = tree.nest(lambda d: {"name": d[1], "tier": d[2], "nodes": nodes.get(d[0], [])}, roots)
        out += [{"name": node_domain(name), "tier": 1, "nodes": [name], "children": [], "domainless": True}
                for name in nodes.get(None, [])]
        return Response(out)


# GPU-equivalents held on a node by its live allocations: 1 per whole GPU (and per MIG instance), the share
# (gpu_milli / 1000) per fraction or GPU-memory share; 4 x 0.5 = 2 (NodeSerializer.allocated_gpus).
ALLOCATED_GPU_EQUIVALENTS = Coalesce(Sum(
    Case(When(gpus__allocations__gpu_milli__gt=0, then=F("gpus__allocations__gpu_milli") / Value(1000.0)),
         default=Value(1.0), output_field=FloatField()),
    filter=Q(gpus__allocations__isnull=False, gpus__allocations__released_at__isnull=True)), Value(0.0),
    output_field=FloatField())


class NodeViewSet(IdempotentCreateMixin, viewsets.ReadOnlyModelViewSet):
    """GPU servers, by name. Platform admins cordon / drain / uncordon; the node agent (platform admins or
    the `node-agents` group) registers nodes and sends heartbeats."""

    serializer_class = NodeSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = NodeFilterSet
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    ordering_fields = ["name", "flavor", "state", "last_heartbeat"]
    idempotent_actions = ("register",)

    # The input normaliser (api/parsers.py) lets NUL through in what a task's process printed: the reports
    # view replaces them one byte for one (a report answered 400 would cost the exit events sent with it).
    nul_tolerant_fields = {"reports": ("logs", "tasks")}

    def get_permissions(self):
        if self.action in ("register", "heartbeat", "assignments", "reports", "validation", "telemetry"):
            return [IsNodeAgentForNode()]  # and, on a node's URL, only for the nodes its token's scope names
        return super().get_permissions()

    def get_queryset(self):
        return (Node.objects.select_related("domain").prefetch_related("gpus")
                .annotate(allocated_gpus=ALLOCATED_GPU_EQUIVALENTS)
                .order_by("name"))

    def _node_response(self, node, **kwargs) -> Response:
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data, **kwargs)

    def _transition(self, request, service, body_serializer=NodeActionSerializer):
        """The node, the body's fields as the service's keyword arguments, the node as it is now."""
        node = self.get_object()
        body = body_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        service(node, actor=request.user, **body.validated_data)
        return self._node_response(node)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def cordon(self, request, name=None):
        """ready -> cordoned: no new work lands on the node; running work continues."""
        return self._transition(request, services.cordon_node)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request, name=None):
        """ready | cordoned -> draining: no new work; running gangs are requeued."""
        return self._transition(request, services.drain_node)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def uncordon(self, request, name=None):
        """cordoned | draining -> ready."""
        return self._transition(request, services.uncordon_node)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def repair(self, request, name=None):
        """cordoned | draining -> in_repair (the repair path, docs/diagnosis.md)."""
        return self._transition(request, services.start_repair)

    @extend_schema(request=NodeSpareSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def spare(self, request, name=None):
        """Mark the node a hot spare ({"spare": true}: only interruptible jobs are placed on it; a gang that lost
        a node restarts on it at once, stopping them) or return it to ordinary use ({"spare": false}). Admins
        only; 400 for a node running tasks of a job that is not interruptible."""
        return self._transition(request, services.set_spare, NodeSpareSerializer)

    @extend_schema(request=NodeGpuSharingSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def sharing(self, request, name=None):
        """Set the sharing mode of the node's GPUs: {"sharing": "shared", "gpus": [3, 4]} (exclusive, shared or
        auto; `gpus` omitted: every GPU not in MIG mode). All or none; each change is an audited `gpu_sharing`
        Event. Admins only; 400 naming the field for a GPU in use, in MIG mode or unknown."""
        return self._transition(request, services.set_node_gpu_sharing, NodeGpuSharingSerializer)

    def _fence(self, request, index, fenced: bool) -> Response:
        node = self.get_object()
        # 404 for a GPU index the node does not have (as for an unknown node); the service's "index" error is a race
        if int(index) > nodes_service.MAX_GPU_INDEX or not node.gpus.filter(index=int(index)).exists():
            raise NotFound(f"node {node.name} has no GPU {index}")
        body = (GpuFenceSerializer if fenced else NodeActionSerializer)(data=request.data)
        body.is_valid(raise_exception=True)
        nodes_service.set_gpu_fence(node, int(index), fenced, reason=body.validated_data["reason"],
                                    actor=request.user)
        return self._node_response(node)

    @extend_schema(request=GpuFenceSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"], url_path=r"gpus/(?P<index>[0-9]{1,6})/fence")
    def fence(self, request, name=None, index=None):
        """Fence one GPU ({"reason": "flapping ECC"}, required): it is not offered to new jobs and shows unhealthy
        with the reason whatever its agent's heartbeats say; a job running on it keeps it, as on a cordoned node.
        Admins only; 404 for an unknown node or GPU index; an audited `gpu_fenced` Event."""
        return self._fence(request, index, True)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"], url_path=r"gpus/(?P<index>[0-9]{1,6})/unfence")
    def unfence(self, request, name=None, index=None):
        """End a GPU's fence: its health is again what its agent last reported. Admins only; an audited
        `gpu_unfenced` Event (none when it was not fenced)."""
        return self._fence(request, index, False)

    @extend_schema(request=NodeValidateSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def validate(self, request, name=None):
        """in_repair -> validating: the node's next heartbeat (or a posted check result) decides."""
        return self._transition(request, services.start_validation, NodeValidateSerializer)

    @extend_schema(request=NodeValidationResultSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def validation(self, request, name=None):
        """The validation check's result (its agent or an operator): validating -> ready (passed) or
        -> in_repair (failed)."""
        return self._transition(request, services.record_validation, NodeValidationResultSerializer)

    @extend_schema(request=NodeRegisterSerializer, responses={201: NodeSerializer})
    @action(detail=False, methods=["post"], filterset_class=None, pagination_class=None)
    def register(self, request):
        """The node agent's inventory: create or update the node and its GPUs (see agent/client.py)."""
        body = NodeRegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        allowed = node_scope_allows(request.user, d["name"])
        if not allowed and Node.objects.filter(name=d["name"]).exists():
            raise PermissionDenied(f"this agent token may not act for node {d['name']}")
        with transaction.atomic():
            node = services.register_node(d["name"], flavor=d["flavor"], gpus=[dict(g) for g in d["gpus"]],
                                          cpu_milli=d["cpu_milli"], memory_mib=d["memory_mib"], labels=d["labels"],
                                          actor=request.user, executor=d["executor"], address=d["address"],
                                          runtime=d["runtime"], accept=allowed)
            if not allowed:  # joined cordoned; its own agent keeps reporting for it
                scope, _ = NodeAgentScope.objects.get_or_create(user=request.user)
                scope.nodes = [*scope.nodes, d["name"]]
                scope.save(update_fields=["nodes"])
        return self._node_response(node, status=status.HTTP_201_CREATED)

    @extend_schema(request=HeartbeatSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def heartbeat(self, request, name=None):
        """The node agent's heartbeat: last_heartbeat and each GPU's health; a not_ready node comes back. A `time`
        more than NODE_CLOCK_MAX_OFFSET_SECONDS from the server's clock is not kept as the node's clock offset: the
        answer then carries `"warnings": {"time": ["..."]}` (the heartbeat still counts)."""
        node = self.get_object()
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        beat = services.record_heartbeat(node.name, gpus=[dict(g) for g in d["gpus"]], node_time=d["time"],
                                         actor=request.user)
        response = self._node_response(node)
        if beat.clock_warning:  # taken, but the node's clock is not believable: said, on the field (trial 13, F13)
            response.data = {**response.data, "warnings": {"time": [beat.clock_warning]}}
        return response

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], filterset_class=None, pagination_class=None)
    def telemetry(self, request, name=None):
        """The node agent's GPU telemetry batch (wire format: agent/telemetry.py, docs/telemetry.md):
        answers {"accepted", "dropped", "xids"}; a malformed body is a 400 naming the field."""
        node = get_object_or_404(Node, name=name)
        from ...telemetry import ingest_telemetry

        return Response(ingest_telemetry(node, request.data, actor=request.user))

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def assignments(self, request, name=None):
        """The node agent's work: each task to run (argv, environment with CUDA_VISIBLE_DEVICES and torchrun's
        rendezvous variables, GPUs) or to stop (with its deadline), on the server's clock (docs/execution.md)."""
        node = get_object_or_404(Node, name=name)
        return Response(execution.node_assignments(node))

    @extend_schema(request=NodeReportsSerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], filterset_class=None, pagination_class=None)
    def reports(self, request, name=None):
        """The node agent's reports: task processes started / exited / lost, and log chunks. Each item is
        answered accepted or not (a stale attempt, a task not on this node, a repeat) and changes nothing
        when refused. Logs are stored before the task events of the same call."""
        node = get_object_or_404(Node, name=name)
        body = NodeReportsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        logs = []
        for c in d["logs"]:
            ok, detail, next_offset = execution.append_log(node, task_id=c["task"], attempt=c["attempt"],
                                                           offset=c["offset"], data=c["data"])
            logs.append({"task": c["task"], "attempt": c["attempt"], "accepted": ok, "detail": detail,
                         "next_offset": next_offset})
        tasks = []
        for r in d["tasks"]:
            ok, detail = execution.report_task_event(node, task_id=r["task"], attempt=r["attempt"], event=r["event"],
                                                     pid=r["pid"], exit_code=r["exit_code"], signal=r["signal"],
                                                     message=r["message"], cause=r["cause"],
                                                     node_time=r["time"] if r["event"] != "started" else None,
                                                     actor=request.user)
            tasks.append({"task": r["task"], "attempt": r["attempt"], "event": r["event"], "accepted": ok,
                          "detail": detail})
        if any(t["accepted"] and t["event"] != "started" for t in tasks):
            services.request_cycle_on_commit()  # GPUs may have been freed
        return Response({"tasks": tasks, "logs": logs})
