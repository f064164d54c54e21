"""Who may do what over the API. One table, enforced here and by the viewsets' querysets:

| role                      | read                                  | write                                          |
| ------------------------- | ------------------------------------- | ---------------------------------------------- |
| platform admin (is_staff) | everything                            | everything: teams, queues, quotas, nodes, jobs |
| team admin (Membership)   | its teams' jobs, members, queues      | its team's members; its team's jobs (submit,   |
|                           | + the shared tree (inner queues,      | cancel, priority)                              |
|                           | domains, nodes, metrics, cycles)      |                                                |
| team member               | same as team admin                    | its team's jobs: submit and cancel             |
| viewer                    | same as team admin                    | nothing                                        |
| node agent (group)        | same as a user with no team           | nodes/register, nodes/{name}/heartbeat         |
| anonymous                 | nothing (401)                         | nothing                                        |

Another team's objects are outside the querysets, so reading or touching them answers 404 (their
existence is not revealed); a visible object the user may not change answers 403. The predicates
(who sees which teams and queues, who may submit, who manages a team) are gpuplatform/access.py's, the
same the pages use.
"""
from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from ..access import can_manage_team, can_submit, is_platform_admin

NODE_AGENT_GROUP = "node-agents"


def is_node_agent(user) -> bool:
    return is_platform_admin(user) or bool(
        user and user.is_authenticated and user.groups.filter(name=NODE_AGENT_GROUP).exists())


class IsPlatformAdminOrReadOnly(BasePermission):
    """Authenticated users read; only platform admins write (teams, queues, quotas, nodes, domains)."""

    message = "only platform admins may change this"

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_platform_admin(request.user)


def node_scope_allows(user, name: str) -> bool:
    """May this user act for node `name` (heartbeat, assignments, reports, re-register)? Platform admins
    always; node agents when their NodeAgentScope names the node (or "*")."""
    if is_platform_admin(user):
        return True
    from ..models import NodeAgentScope

    scope = NodeAgentScope.objects.filter(user=user).first()
    return scope is not None and scope.covers(name)


class IsNodeAgent(BasePermission):
    """Platform admins, and users in the `node-agents` group (the node agent's dedicated token)."""

    message = "only platform admins and node agents may report nodes"

    def has_permission(self, request, view) -> bool:
        if is_node_agent(request.user):
            return True
        if getattr(view, "action", None) == "assignments":  # a read, not a report (new-user trial 23)
            self.message = "only platform admins and node agents may read a node's assignments"
        return False


class IsNodeAgentForNode(IsNodeAgent):
    """IsNodeAgent, and on a node's URL (`name`) only for the nodes the token's scope names
    (models.NodeAgentScope; platform admins: any). One check for every agent action of the node viewset."""

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        name = view.kwargs.get(view.lookup_url_kwarg or view.lookup_field)
        if name is None or node_scope_allows(request.user, name):
            return True
        self.message = f"this agent token may not act for node {name}"
        return False


class JobPermission(BasePermission):
    """Read: the queryset limits jobs to the user's teams. Submit / cancel: member or admin of the job's
    team. Priority change: team admin. Platform admins: everything."""

    message = "you may not change jobs of this team"

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)  # submit: checked against the body's team

    def has_object_permission(self, request, view, obj) -> bool:
        if request.method in SAFE_METHODS:
            return True
        if view.action in ("update", "partial_update"):
            if can_manage_team(request.user, obj.team_id):
                return True
            # the rule itself (new-user trial 8, F13: "you may not change jobs of this team" to a member who
            # may cancel the job); checked after the body (JobViewSet.partial_update), so a body that is no
            # priority change is the 400 everyone gets (new-user trial 24, F7)
            self.message = (f"changing a job's priority needs a team admin of {obj.team.name} (or a platform "
                            f"admin); members may submit and cancel its jobs")
            return False
        return can_submit(request.user, obj.team_id)


class MembershipPermission(BasePermission):
    """Read: memberships of the user's teams. Write: platform admins and the team's admins."""

    message = "only platform admins and the team's admins may manage its members"

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request, view, obj) -> bool:
        return request.method in SAFE_METHODS or can_manage_team(request.user, obj.team_id)
