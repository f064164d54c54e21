from rest_framework import serializers

from ...models import Queue, Quota, Team
from ...services.queues import MAX_GRACE_SECONDS
from .base import ModelSerializer, Serializer
from .fields import count_field, named_field, quota_field, weight_field


class QuotaSerializer(ModelSerializer):
    """One queue's quota for one GPU flavor, in GPUs: guarantee <= quota <= limit (limit null = the parent's)."""

    queue = named_field("queue", "name", Queue.objects.all())
    flavor = serializers.CharField(max_length=64)
    guarantee = quota_field("guarantee", default=0)
    quota = quota_field("quota", default=0)
    limit = quota_field("limit", allow_null=True, required=False, default=None)

    class Meta:
        model = Quota
        fields = ["id", "queue", "flavor", "guarantee", "quota", "limit", "updated_at"]
        read_only_fields = ["id", "updated_at"]
        validators = []  # (queue, flavor) uniqueness is checked by the view with a clear message


class QuotaChangedSerializer(QuotaSerializer):
    """The answer to POST /api/v1/quotas/ and PATCH / PUT /api/v1/quotas/<id>/: the quota, plus `quota_note` when the
    queue uses more of the flavor now than its quota (services.queues.quota_note). Response only (absent otherwise)."""

    quota_note = serializers.CharField(
        required=False,
        help_text="only when the queue (with the queues below it) uses more GPUs of the flavor now than the quota, or "
                  "the limit, allows: the change is accepted and its running jobs keep their GPUs; says what the "
                  "scheduler does then (above the limit: no new job of the queue or below it starts, and none grows, "
                  "on that flavor until use plus request fits; above the quota: borrowed, reclaimable by other "
                  "queues, never below the guarantee)")

    class Meta(QuotaSerializer.Meta):
        fields = QuotaSerializer.Meta.fields + ["quota_note"]
        read_only_fields = QuotaSerializer.Meta.fields


class QuotaUpdateSerializer(Serializer):
    guarantee = quota_field("guarantee")
    quota = quota_field("quota")
    limit = quota_field("limit", allow_null=True)


class QuotaTripleSerializer(Serializer):
    flavor = serializers.CharField(max_length=64)
    guarantee = quota_field("guarantee", default=0)
    quota = quota_field("quota", default=0)
    limit = quota_field("limit", allow_null=True, required=False, default=None)


class QueueSerializer(ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    quotas = QuotaTripleSerializer(many=True, read_only=True)
    children = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = Queue
        fields = ["id", "name", "parent", "team", "weight", "state", "preemption_grace_seconds", "quotas",
                  "children", "created_at", "updated_at"]
        read_only_fields = fields


class QueueChangedSerializer(QueueSerializer):
    """The answer to PATCH / PUT /api/v1/queues/<name>/: the queue, plus `state_note` when the state given
    differs from the one asked (closed asked, closing given). Response only (not required: absent otherwise)."""

    state_note = serializers.CharField(
        required=False,
        help_text="only when `state: closed` was asked and `closing` given: why (the queue still has pending or "
                  "live jobs; it takes no new jobs and becomes closed when its last job ends)")

    class Meta(QueueSerializer.Meta):
        fields = QueueSerializer.Meta.fields + ["state_note"]
        read_only_fields = QueueSerializer.Meta.fields


# services.queues.queue_grace_error's words, for a value beyond 32 bits too (new-user trial 22, G11)
GRACE_RULE = f"preemption_grace_seconds must be a whole number of seconds from 0 to {MAX_GRACE_SECONDS}"


class QueueCreateSerializer(Serializer):
    name = serializers.CharField(max_length=100)
    parent = serializers.CharField(max_length=100, allow_null=True, required=False, default=None,
                                   help_text="parent queue name; null = a root queue")
    team = named_field("team", "slug", Team.objects.all(), allow_null=True, required=False, default=None,
                       help_text="owning team (leaf queues)")
    weight = weight_field(default=1.0)
    state = serializers.CharField(default="open", max_length=16)
    preemption_grace_seconds = count_field(GRACE_RULE, default=30,
                                           help_text="seconds a preempted job gets to checkpoint (0 to 86400)")
    quotas = QuotaTripleSerializer(many=True, required=False, default=list)


class QueueUpdateSerializer(Serializer):
    parent = serializers.CharField(max_length=100, allow_null=True, required=False,
                                   help_text="new parent queue name; null = make it a root")
    weight = weight_field(required=False)
    state = serializers.CharField(required=False, max_length=16,
                                  help_text="closed while the queue has pending or live jobs gives closing: it "
                                            "takes no new jobs and becomes closed when its last job ends")
    preemption_grace_seconds = count_field(GRACE_RULE, required=False, help_text="seconds a preempted job gets to "
                                                                      "checkpoint (0 to 86400)")


class QueueReplaceSerializer(QueueUpdateSerializer):
    """PUT /api/v1/queues/<name>/: the whole writable queue (parent, weight, state, preemption_grace_seconds),
    every field required, as PUT on a quota needs its whole triple (RFC 9110: PUT replaces; PATCH changes some;
    new-user trial 11, F17: PUT {"weight": 2} was a partial update)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.required = True


class QueueTreeSerializer(Serializer):
    name = serializers.CharField()
    team = serializers.CharField(allow_null=True)
    weight = serializers.FloatField()
    state = serializers.CharField()
    quotas = QuotaTripleSerializer(many=True)
    children = serializers.ListField(child=serializers.DictField(), help_text="the same shape, recursively")
