"""A team keeps at least one admin: its last admin cannot be removed or demoted, by themselves or by a
platform admin (400 naming `role`); with a second admin either may go; deleting the team removes its
memberships (new-user trial 7, F19)."""
from __future__ import annotations

import pytest

from gpuplatform.models import Membership, Team

pytestmark = pytest.mark.django_db

URL = "/api/v1/memberships/"


def own(users, role="team_admin", team="alpha"):
    return Membership.objects.get(user=users[role], team__name=team)


@pytest.mark.parametrize("who", ["team_admin", "staff"])
def test_the_last_admin_cannot_be_removed_or_demoted(users, client_for, who):
    client, last = client_for(who), own(users)
    r = client.delete(f"{URL}{last.pk}/")
    assert r.status_code == 400 and "last admin" in r.json()["role"][0], r.content
    r = client.patch(f"{URL}{last.pk}/", {"role": "member"}, format="json")
    assert r.status_code == 400 and "last admin" in r.json()["role"][0], r.content
    assert Membership.objects.get(pk=last.pk).role == "admin"
    assert client_for("team_admin").get("/api/v1/me/").json()["teams"] == [{"team": "alpha", "role": "admin"}]


def test_with_a_second_admin_either_may_go(users, client_for):
    mike = own(users, "member")
    assert client_for("team_admin").patch(f"{URL}{mike.pk}/", {"role": "admin"}, format="json").status_code == 200
    alice = own(users)
    assert client_for("team_admin").delete(f"{URL}{alice.pk}/").status_code == 204
    r = client_for("member").patch(f"{URL}{mike.pk}/", {"role": "member"}, format="json")
    assert r.status_code == 400 and "last admin" in r.json()["role"][0]  # now mike is the last one


def test_a_team_without_an_admin_loses_members_freely_and_deleting_a_team_works(users, client_for):
    bob = own(users, "other", "beta")
    assert client_for("staff").delete(f"{URL}{bob.pk}/").status_code == 204  # beta's admin bea stays
    from gpuplatform import services

    gamma = services.create_team("gamma")
    services.add_member(gamma, users["other_admin"], "admin")
    Team.objects.filter(pk=gamma.pk).delete()  # the team goes with its last admin's membership
    assert not Membership.objects.filter(team__name="gamma").exists()
