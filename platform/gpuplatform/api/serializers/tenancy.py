from django.contrib.auth import get_user_model
from rest_framework import serializers

from ...models import Membership, Team
from ...services.tenancy import TEAM_DESCRIPTION_MAX, team_description_error
from .base import ModelSerializer
from .fields import named_field


class DescriptionField(serializers.CharField):
    """A team's description: the text as sent is checked (services.tenancy.team_description_error: no control
    character, no line / paragraph separator), then its leading and trailing white space trimmed. DRF's own trim ran
    first, so a description of only '\\v', '\\f', U+0085 or U+2028 was trimmed to "" and stored while the same
    character inside the text was refused (trial 20, F7); now it is refused wherever it is. Only white space that is
    not such a character (spaces, tabs, newlines) is trimmed: a description of only spaces is stored as "", as
    before."""

    own_text_rule = True  # the same control rule, its own words; blank kept ("" stored): fields.make_text_fields_strict

    def __init__(self, **kwargs):
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        message = team_description_error(value)
        if message:
            raise serializers.ValidationError(message)
        return value.strip()


class TeamSerializer(ModelSerializer):
    slug = serializers.SlugField(max_length=100, required=False, help_text="default: derived from the name")
    description = DescriptionField(max_length=TEAM_DESCRIPTION_MAX, required=False, allow_blank=True,
                                   help_text=f"free text, at most {TEAM_DESCRIPTION_MAX} characters, without control "
                                             f"characters other than newline and tab")

    class Meta:
        model = Team
        fields = ["id", "name", "slug", "description", "created_at"]
        read_only_fields = ["id", "created_at"]
        extra_kwargs = {"name": {"validators": []}}  # uniqueness is the service's rule (one message shape)


class TeamUpdateSerializer(TeamSerializer):
    """PATCH /api/v1/teams/<slug>/ (some of name, description) and PUT (both): services.update_team. `slug` may be
    sent only as it is: a team's slug does not change (the API's URLs, its jobs', memberships' and queues' `team`,
    the metrics' labels and federated jobs name the team by it)."""

    class Meta(TeamSerializer.Meta):
        fields = ["name", "slug", "description"]
        read_only_fields = []

    def __init__(self, *args, replace: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["description"].required = replace  # PUT: name and description; PATCH: any of them


class MembershipSerializer(ModelSerializer):
    team = named_field("team", "slug", Team.objects.all())
    user = named_field("user", "username", get_user_model().objects.all())

    class Meta:
        model = Membership
        fields = ["id", "team", "user", "role"]
        read_only_fields = ["id"]
        validators = []  # (user, team) uniqueness: add_member updates the role instead
