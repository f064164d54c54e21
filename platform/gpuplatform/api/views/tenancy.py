from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import access, services
from ...models import Membership
from ..filters import MembershipFilterSet, TeamFilterSet, refuse_unknown_params
from ..permissions import IsPlatformAdminOrReadOnly, MembershipPermission
from ..idempotency import IdempotentCreateMixin
from ..serializers import MembershipSerializer, TeamSerializer
from ..serializers.tenancy import TeamUpdateSerializer


class TeamViewSet(IdempotentCreateMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    """Teams (tenants), by slug. Everyone sees the teams they belong to, platform admins all; only platform admins
    create teams and change them (PATCH: name and / or description; PUT: both). The slug does not change."""

    serializer_class = TeamSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = TeamFilterSet
    lookup_field = "slug"
    ordering_fields = ["name", "created_at"]

    def get_queryset(self):
        return access.visible_teams(self.request.user).order_by("name")

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.create_team(data["name"], slug=data.get("slug"),
                                                   description=data.get("description", ""), actor=self.request.user)

    @extend_schema(request=TeamUpdateSerializer, responses={200: TeamSerializer})
    def partial_update(self, request, slug=None):
        """Rename a team and / or change its description (services.update_team: create's rules, a name taken
        is a 400 on `name`, an Event "team_updated"). Its slug, and so this URL, stays."""
        return self._update(request, replace=False)

    @extend_schema(request=TeamUpdateSerializer, responses={200: TeamSerializer})
    def update(self, request, slug=None):
        """PUT: the whole writable team, `name` and `description` (a `slug` sent must be the team's)."""
        return self._update(request, replace=True)

    def _update(self, request, *, replace: bool):
        team = self.get_object()  # visibility and permissions first (404 / 403)
        body = TeamUpdateSerializer(data=request.data, partial=not replace, replace=replace)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        if "slug" in d and d["slug"] != team.slug:
            raise services.ValidationError({"slug": f"a team's slug does not change ({team.slug!r}): the API's URLs, "
                                                    f"its jobs, memberships and queues and the metrics name the team "
                                                    f"by it; rename the team with `name`"})
        saved = services.update_team(team, name=d.get("name"), description=d.get("description"), actor=request.user)
        if saved is None:
            raise NotFound("No Team matches the given query.")  # deleted by a concurrent request
        return Response(TeamSerializer(saved).data)


class MembershipViewSet(IdempotentCreateMixin, viewsets.ModelViewSet):
    """Who is in which team with which role (member | admin | viewer). Team admins manage their own
    team's members; platform admins any team's. Changing `role` is the only update."""

    serializer_class = MembershipSerializer
    permission_classes = [MembershipPermission]
    filterset_class = MembershipFilterSet
    ordering_fields = ["team__name", "user__username", "role"]

    def get_queryset(self):
        qs = Membership.objects.select_related("team", "user").order_by("team__name", "user__username")
        team_ids = access.visible_team_ids(self.request.user)
        return qs if team_ids is None else qs.filter(team_id__in=team_ids)

    def perform_create(self, serializer):
        data = serializer.validated_data
        if not access.can_manage_team(self.request.user, data["team"].pk):
            raise PermissionDenied(MembershipPermission.message)
        serializer.instance = services.add_member(data["team"], data["user"], data["role"], actor=self.request.user)

    def perform_update(self, serializer):
        current = serializer.instance
        data = serializer.validated_data
        team, user = data.get("team", current.team), data.get("user", current.user)
        if (team.pk, user.pk) != (current.team_id, current.user_id):
            raise services.ValidationError({"team": "team and user of a membership cannot change; "
                                                    "remove it and add a new one"})
        changed = services.add_member(team, user, data.get("role", current.role), actor=self.request.user,
                                      existing=True)
        if changed is None:
            raise NotFound("No Membership matches the given query.")  # removed by a concurrent request
        serializer.instance = changed

    def perform_destroy(self, instance):
        if not services.remove_member(instance, actor=self.request.user):
            raise NotFound("No Membership matches the given query.")  # removed by a concurrent request

    def create(self, request, *args, **kwargs):
        """Add a member: 201 with the new membership; 200 with it when the user was already in the team (the
        same request again, or a new role for them): adding is idempotent, so a script that adds its
        members can run twice, and the status says whether a membership was created."""
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        self.perform_create(serializer)
        added = getattr(serializer.instance, "was_added", True)  # services.add_member's, under its lock
        return Response(self.get_serializer(serializer.instance).data,
                        status=status.HTTP_201_CREATED if added else status.HTTP_200_OK)


class MeView(APIView):
    """The authenticated user: name, platform-admin flag and team roles (what `gpuctl` shows first)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: {"type": "object", "properties": {
        "username": {"type": "string"}, "platform_admin": {"type": "boolean"},
        "teams": {"type": "array", "items": {"type": "object", "properties": {
            "team": {"type": "string"}, "role": {"type": "string"}}}}}}})
    def get(self, request):
        refuse_unknown_params(request, ())  # it reads none: ?foo= is a 400 naming it (new-user trial 10, F21)
        teams = [{"team": slug, "role": role} for slug, role in
                 Membership.objects.filter(user=request.user).values_list("team__slug", "role").order_by("team__slug")]
        return Response({"username": request.user.get_username(), "platform_admin": access.is_platform_admin(request.user),
                         "teams": teams})

