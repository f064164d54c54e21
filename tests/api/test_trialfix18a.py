"""Break-it trial 18a: a user's account deleted (the admin's User delete page and its "delete selected" action, or
any other path) never takes a team's last admin with it (G13); a membership write holds the team's members lock
only; GET /api/v1/federation/clusters/ follows the lists' query-parameter rules (G15); a team's description has a
limit; a what-if drains a node once; the admin's spare actions count the nodes they changed; a member cluster's
name taken reads one way, however the requests meet."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Membership, Team

pytestmark = pytest.mark.django_db


# --- a membership write holds the team's members lock, and no second lock per membership -------------------------

@pytest.mark.services
def test_membership_writes_take_the_team_members_lock_and_no_per_membership_lock(users, monkeypatch):
    """lock_team_members already runs every membership write of a team one after the other; the per-membership
    lock_name("membership", ...) taken under it repeated it."""
    from gpuplatform.services import tenancy

    taken = []
    real = tenancy.lock_name
    monkeypatch.setattr(tenancy, "lock_name", lambda namespace, value: (taken.append(namespace), real(namespace, value)))
    team = Team.objects.get(name="beta")
    row = services.add_member(team, users["viewer"], "member")
    services.add_member(team, users["viewer"], "admin", existing=True)
    assert services.remove_member(row) is True
    assert taken and set(taken) == {"team members"}, taken
