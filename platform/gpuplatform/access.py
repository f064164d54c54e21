"""Who may see and do what: the one set of predicates behind the pages (frontend/) and the API (the DRF
permission classes in api/permissions.py and the viewsets' querysets). Read only; nothing here writes.

| who                                  | sees                                      | may                                    |
| ------------------------------------ | ----------------------------------------- | -------------------------------------- |
| platform admin (is_staff, superuser) | every team, job and queue                 | everything                             |
| ops (`gpuplatform.view_job` perm.)   | every team, job and queue                 | what its team roles allow              |
| team admin (Membership)              | its teams' jobs; the platform's inner     | submit / cancel its teams' jobs,       |
|                                      | queues and its teams' queues              | change their priority, manage members  |
| team member                          | as a team admin                           | submit / cancel its teams' jobs        |
| viewer                               | as a team admin                           | nothing                                |

Functions answering "every team" return None instead of a set of team ids.
"""
from __future__ import annotations

from django.db.models import Q, QuerySet

from .models import Job, Membership, Queue, Team

SUBMIT_ROLES = (Membership.Role.MEMBER, Membership.Role.ADMIN)


# --- who is who -------------------------------------------------------------------------------------

def is_platform_admin(user) -> bool:
    return bool(user and user.is_authenticated and (user.is_staff or user.is_superuser))


def sees_all(user) -> bool:
    """Platform admins, and ops: a user granted the `gpuplatform.view_job` permission (e.g. through an
    "ops" group) reads every team's jobs and queues. Reading only: writes still need a team role."""
    return bool(user and user.is_authenticated
                and (user.is_staff or user.is_superuser or user.has_perm("gpuplatform.view_job")))


def team_role(user, team_id: int | None) -> str | None:
    """The user's role in the team (member | admin | viewer), or None."""
    if team_id is None or not (user and user.is_authenticated):
        return None
    return Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()


# --- reading ----------------------------------------------------------------------------------------

def visible_team_ids(user) -> set[int] | None:
    """The teams whose jobs the user reads; None = every team."""
    if sees_all(user):
        return None
    if not (user and user.is_authenticated):
        return set()
    return set(Membership.objects.filter(user=user).values_list("team_id", flat=True))


def visible_teams(user) -> QuerySet[Team]:
    team_ids = visible_team_ids(user)
    return Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=team_ids)


def visible_jobs(user) -> QuerySet[Job]:
    team_ids = visible_team_ids(user)
    return Job.objects.all() if team_ids is None else Job.objects.filter(team_id__in=team_ids)


def queue_visibility(user, prefix: str = "") -> Q | None:
    """The queues the user sees, as a filter on `<prefix>team`: the platform's inner queues (no team) and
    the user's teams' queues; None = every queue. `prefix` names the queue from another model
    ("queue__" for quotas and events)."""
    team_ids = visible_team_ids(user)
    if team_ids is None:
        return None
    return Q(**{f"{prefix}team__isnull": True}) | Q(**{f"{prefix}team_id__in": team_ids})


def visible_queues(user) -> QuerySet[Queue]:
    where = queue_visibility(user)
    return Queue.objects.all() if where is None else Queue.objects.filter(where)


# --- writing ----------------------------------------------------------------------------------------

def submit_team_ids(user) -> set[int] | None:
    """The teams the user may submit (and cancel) jobs for: every team for a platform admin (None), else
    those where the user is a member or admin (never a viewer)."""
    if is_platform_admin(user):
        return None
    if not (user and user.is_authenticated):
        return set()
    return set(Membership.objects.filter(user=user, role__in=SUBMIT_ROLES).values_list("team_id", flat=True))


def can_submit(user, team_id: int | None) -> bool:
    """May the user submit and cancel jobs of this team."""
    team_ids = submit_team_ids(user)
    return team_ids is None or team_id in team_ids


def submit_teams(user) -> QuerySet[Team]:
    """The teams `can_submit` allows, by name."""
    team_ids = submit_team_ids(user)
    teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=team_ids)
    return teams.order_by("name")


def submit_queues(user) -> QuerySet[Queue]:
    """The leaf queues of the teams the user may submit for, by name (closed and draining ones too: the
    submission service answers why they take no jobs)."""
    return (Queue.objects.filter(team__in=submit_teams(user), children__isnull=True)
            .select_related("team").order_by("name"))


def can_manage_team(user, team_id: int | None) -> bool:
    """May the user manage the team's members and change its jobs' priorities (team admins)."""
    return is_platform_admin(user) or team_role(user, team_id) == Membership.Role.ADMIN
