from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from ... import services
from ...diagnosis import tables
from ...models import DiagnosisRule, HealthRule
from ..filters import DiagnosisRuleFilterSet, HealthRuleFilterSet
from ..permissions import IsPlatformAdminOrReadOnly
from ..serializers.rules import DiagnosisRuleSerializer, HealthRuleSerializer


class _RuleViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Shared: platform admins add and change rules (through the service, which checks them with the
    shipped table's parser and audits them); every signed-in user reads them. No delete: set enabled false."""

    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = None  # each rule list's: enabled (api/filters.py)
    ordering_fields = ["id", "name"]
    model = None
    service = None
    shipped_table = None  # the shipped table's loader: {version, rules}

    def get_queryset(self):
        return self.model.objects.order_by("id")

    def perform_create(self, serializer):
        serializer.instance = type(self).service(self.model(**serializer.validated_data), actor=self.request.user)

    def perform_update(self, serializer):
        rule = serializer.instance
        for k, v in serializer.validated_data.items():
            setattr(rule, k, v)
        serializer.instance = type(self).service(rule, actor=self.request.user)

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"], filterset_class=None, pagination_class=None)
    def shipped(self, request):
        """The shipped table (gpuplatform/diagnosis/rules.yaml for diagnosis rules, health_rules.yaml for
        health rules): {version, rules}."""
        return Response(type(self).shipped_table())


class DiagnosisRuleViewSet(_RuleViewSet):
    """Admins' diagnosis rules, used after the shipped table (GET .../shipped/) from the next failure on."""

    serializer_class = DiagnosisRuleSerializer
    filterset_class = DiagnosisRuleFilterSet
    model = DiagnosisRule
    service = staticmethod(services.save_diagnosis_rule)
    shipped_table = staticmethod(tables.shipped_rules)


class HealthRuleViewSet(_RuleViewSet):
    """Admins' node health rules, used after the shipped table (GET .../shipped/) from the next heartbeat on."""

    serializer_class = HealthRuleSerializer
    filterset_class = HealthRuleFilterSet
    model = HealthRule
    service = staticmethod(services.save_health_rule)
    shipped_table = staticmethod(tables.shipped_health_rules)
