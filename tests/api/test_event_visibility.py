"""Issue #12, leaks: a cross-team reclaim must not show the victim's job name to the beneficiary's team
(the `reclaim` event's message and data.victims[].name) nor the beneficiary's name to the victim's team
(the `reclaimed` event's message and data.reason), on the API and the job page: events follow the map's
rule, "a job of team X". Platform admins still read every name."""
from __future__ import annotations

import pytest

from gpuplatform.models import Event, Queue
from gpuplatform.scheduling import store
from scheduler.core.snapshot import CycleResult, Eviction, Nomination, TaskPlacement
from tests.platform.test_store_evictions import at, decision, start

pytestmark = pytest.mark.django_db

SECRET_VICTIM, SECRET_BENEFICIARY = "beta-secret-run-7", "alpha-secret-plan"


@pytest.fixture
def reclaim(users):
    """alpha's job reclaims GPUs from beta's running job (and from alpha's own running job)."""
    from gpuplatform import services

    alpha, beta = Queue.objects.get(name="alpha"), Queue.objects.get(name="beta")
    sub = lambda q, name, who: services.submit_job(command=["sleep", "1"], team=q.team, queue=q, name=name,  # noqa: E731
                                                   roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 8}],
                                                   submitter=users[who])
    victim, own = sub(beta, SECRET_VICTIM, "other"), sub(alpha, "alpha-own-victim", "member")
    start(victim, ("n0", tuple(range(8))))
    start(own, ("n1", tuple(range(8))))
    ben = sub(alpha, SECRET_BENEFICIARY, "member")
    store.apply_result(CycleResult(
        evictions=[Eviction(victim.pk, (), 8, "reclaim", ben.pk, f"reclaim: gang of {SECRET_VICTIM} for {SECRET_BENEFICIARY}"),
                   Eviction(own.pk, (), 8, "reclaim", ben.pk, "reclaim: gang of alpha-own-victim")],
        nominations=[Nomination(ben.pk, (TaskPlacement("worker", 0, "n0", tuple(range(8))),), "hold")],
        decisions=[decision(ben, [(victim, (), 8), (own, (), 8)])]), clock=at(10), cycle_number=50)
    return {"victim": victim, "own": own, "ben": ben}


def _events(client, **query):
    r = client.get("/api/v1/events/", query)
    assert r.status_code == 200
    return r.json()["results"]


def test_beneficiary_team_sees_a_job_of_team_beta(client_for, reclaim):
    ev = next(e for e in _events(client_for("member"), kind="reclaim"))
    text = str(ev)
    assert SECRET_VICTIM not in text, text
    assert "a job of team beta" in ev["message"] and "alpha-own-victim" in ev["message"]
    names = {v["job"]: v["name"] for v in ev["data"]["victims"]}
    assert names == {reclaim["victim"].pk: "a job of team beta", reclaim["own"].pk: "alpha-own-victim"}
    assert SECRET_BENEFICIARY in ev["message"]  # its own job keeps its name


def test_victim_team_does_not_see_the_beneficiary_name(client_for, reclaim):
    ev = next(e for e in _events(client_for("other"), kind="reclaimed"))
    assert ev["job"] == reclaim["victim"].pk
    assert SECRET_BENEFICIARY not in str(ev) and "a job of team alpha" in ev["message"]
    assert SECRET_VICTIM in ev["message"]


def test_platform_admin_reads_every_name(client_for, reclaim):
    ev = next(e for e in _events(client_for("staff"), kind="reclaim"))
    assert SECRET_VICTIM in ev["message"] and SECRET_BENEFICIARY in ev["message"]
    assert Event.objects.get(kind="reclaim").message == ev["message"]


def test_job_page_follows_the_same_rule(client, users, reclaim):
    client.force_login(users["member"])
    page = client.get(f"/jobs/{reclaim['ben'].pk}/").content.decode()
    assert SECRET_VICTIM not in page and "a job of team beta" in page
    client.force_login(users["other"])
    page = client.get(f"/jobs/{reclaim['victim'].pk}/").content.decode()
    assert SECRET_BENEFICIARY not in page and "a job of team alpha" in page


def test_a_member_of_both_teams_reads_both_names(client_for, users, reclaim):
    from gpuplatform import services
    from gpuplatform.models import Team

    services.add_member(Team.objects.get(name="beta"), users["member"], "viewer")
    ev = next(e for e in _events(client_for("member"), kind="reclaim"))
    assert SECRET_VICTIM in ev["message"]
