"""New-user trial 17b: concurrent writes answer their rule's 400, never a deadlock's 503 or a unique index's 500
(F10, F14); a queue move and the scheduling cycle's usage record at once both commit (F11); a blank list filter is a 400 naming it (F12); a detail id that is not a whole number is a 404, not a
complaint about `format` (F13)."""
from __future__ import annotations

import dataclasses

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.api.helpers_api import at_once, ordered


def _team_of_admins(n: int, tag: str):
    from gpuplatform import services

    team = services.create_team(f"t17b-{tag}")
    User = get_user_model()
    members = []
    for i in range(n):
        user = User.objects.create_user(f"{tag}-u{i}", password="pw")
        members.append(services.add_member(team, user, "admin"))
    return team, members


def _statuses(answers) -> list:
    return sorted(getattr(a, "status_code", None) for a in answers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
@pytest.mark.parametrize("verb", ["patch", "mixed"])
def test_three_admins_demoted_or_removed_at_once_leave_one_and_the_rest_read_the_rule(client_for, verb):
    """F10: each request locked its own membership row, then every admin row of the team (the last-admin
    rule): they deadlocked and one answered 503 (three demotions, or removals beside demotions; three removals
    alone locked the rows in one order). Now the team's lock comes first: 2 succeed, 1 gets the 400."""
    from gpuplatform.models import Membership

    clients = [client_for("staff") for _ in range(3)]
    for round_ in range(4):
        team, members = _team_of_admins(3, f"r{verb}{round_}")
        if verb == "patch":
            calls = [lambda c=c, m=m: c.patch(f"/api/v1/memberships/{m.pk}/", {"role": "member"}, format="json")
                     for c, m in zip(clients, members)]
        else:  # the first admin removed, the others demoted
            calls = [lambda c=c, m=m, i=i: (c.delete(f"/api/v1/memberships/{m.pk}/") if i == 0 else
                                            c.patch(f"/api/v1/memberships/{m.pk}/", {"role": "member"}, format="json"))
                     for i, (c, m) in enumerate(zip(clients, members))]
        answers = at_once(calls)
        assert all(a is not None and a.status_code in (200, 204, 400) for a in answers), \
            [(a.status_code, a.content) for a in answers if a is not None]
        assert _statuses(answers).count(400) == 1, [(a.status_code, a.content) for a in answers if a is not None]
        refused = next(a for a in answers if a.status_code == 400).json()
        assert "last admin" in refused["role"][0], refused
        assert Membership.objects.filter(team=team, role="admin").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_role_change_ordered_after_a_removal_of_the_membership_does_not_bring_it_back(client_for):
    """Trial 17c, G16: a PATCH of a membership's role racing its DELETE re-created it under a new id: the removed
    member came back as admin (PATCH /memberships/27/ -> 200 {"id": 28, "role": "admin"}). The removal commits
    first here; the role change then finds nothing to change: 404, and the member stays removed."""
    from gpuplatform import services
    from gpuplatform.models import Membership

    team, (keep, gone) = _team_of_admins(2, "g16")
    staff = client_for("staff")
    out = ordered(lambda: services.remove_member(Membership.objects.get(pk=gone.pk)),
                  lambda: staff.patch(f"/api/v1/memberships/{gone.pk}/", {"role": "member"}, format="json"))
    assert "first_error" not in out and out["result"].status_code == 404, out
    assert not Membership.objects.filter(team=team, user=gone.user).exists()
    assert list(Membership.objects.filter(team=team).values_list("pk", flat=True)) == [keep.pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
@pytest.mark.parametrize("url,body", [
    ("/api/v1/diagnosis-rules/", {"name": "rc", "pattern": "y", "category": "cuda_oom", "source": "t"}),
    ("/api/v1/health-rules/", {"name": "hc0", "signal": "xid", "op": "in", "value": [48], "action": "cordon",
                               "source": "t"}),
])
def test_one_rule_name_added_eight_times_at_once_is_one_201_and_seven_400s(client_for, url, body):
    """F14: the losers past the name check hit the unique index: 500. Now the name's lock: 1 x 201, 7 x 400."""
    clients = [client_for("staff") for _ in range(8)]
    answers = at_once([lambda c=c: c.post(url, body, format="json") for c in clients])
    assert _statuses(answers) == [201] + [400] * 7, [(getattr(a, "status_code", None), getattr(a, "content", None))
                                                      for a in answers]
    for a in answers:
        if a.status_code == 400:
            assert "exists" in a.json()["name"][0], a.json()
    from gpuplatform.models import DiagnosisRule, HealthRule

    model = DiagnosisRule if "diagnosis" in url else HealthRule
    assert model.objects.filter(name=body["name"]).count() == 1


# --- F12 -------------------------------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("query,param", [
    ("external_id=%20", "external_id"), ("external_id=", "external_id"), ("external_id=%0a", "external_id"),
    ("name=%20", "name"), ("team=%20", "team"), ("queue=%20%20", "queue"), ("submitted_after=", "submitted_after"),
    ("state=pending&name=%09", "name"), ("submitter=%20", "submitter"),
])
def test_a_blank_jobs_filter_is_a_400_naming_it(admin, jobs, query, param):
    """F12: django-filter skipped a blank value, so ?external_id=%20 listed (and let a script cancel) every job."""
    r = admin.get(f"/api/v1/jobs/?{query}")
    assert r.status_code == 400, (r.status_code, r.content[:300])
    assert list(r.json()) == [param] and r.json()[param][0].startswith("must not be empty"), r.json()
    assert "leave the parameter out" in r.json()[param][0]


@pytest.mark.django_db
@pytest.mark.parametrize("url,param", [
    ("/api/v1/memberships/?team=%20", "team"), ("/api/v1/queues/?name=", "name"), ("/api/v1/events/?kind=%20", "kind"),
    ("/api/v1/nodes/?flavor=%20", "flavor"), ("/api/v1/teams/?slug=", "slug"), ("/api/v1/quotas/?queue=%20", "queue"),
    ("/api/v1/diagnosis-rules/?enabled=%20", "enabled"),
])
def test_a_blank_filter_is_a_400_on_every_list(admin, url, param):
    r = admin.get(url)
    assert r.status_code == 400 and list(r.json()) == [param], (r.status_code, r.content[:300])


@pytest.mark.django_db
def test_filled_filters_and_the_jobs_page_with_empty_fields_still_work(admin, jobs, client_for, users):
    assert admin.get("/api/v1/jobs/?team=alpha&name__contains=alpha").json()["count"] == 1
    # trial 20, F3: an empty state item, a boolean's or the paging's empty value are a 400 too (they were "any" and
    # the defaults): tests/api/test_s20_inputs.py
    for query in ("state=pending&state=", "never_fits=", "limit=&ordering="):
        assert admin.get(f"/api/v1/jobs/?{query}").status_code == 400, query
    page = client_for("member")
    page.force_login(users["member"])
    r = page.get("/jobs/?q=&team=&state=&queue=&submitter=")  # the page's form, nothing filled in
    assert r.status_code == 200 and b"alpha-job" in r.content


# --- F13 -------------------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_detail_id_that_is_not_a_whole_number_is_a_404_not_a_format_error(admin, jobs):
    """F13: the router's format suffix read /jobs/1.5/ as job 1 in format "5": 400 {"format": [...]}."""
    job = jobs["own"].pk
    for url in (f"/api/v1/jobs/{job}.5/", f"/api/v1/jobs/{job}.5", f"/api/v1/jobs/{job}.5/cancel/",
                "/api/v1/teams/alpha.5/", "/api/v1/memberships/1.0/", "/api/v1/diagnosis-rules/1.5/"):
        r = admin.get(url)
        assert r.status_code == 404 and b"format" not in r.content, (url, r.status_code, r.content[:200])
    r = admin.post(f"/api/v1/jobs/{job}.5/cancel/", {}, format="json")
    assert r.status_code == 404, r.content
    assert jobs["own"].__class__.objects.get(pk=job).state == "pending"
    # the renderers' suffixes still work
    assert admin.get(f"/api/v1/jobs/{job}.json").json()["id"] == job
    assert admin.get("/api/v1/queues/alpha.json").json()["name"] == "alpha"


# --- F11 -------------------------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_queue_move_and_the_cycles_usage_record_at_once_both_commit(cluster):
    """F11: a queue move (the queue tree's lock exclusive, the moved queue's row, and at commit the deferred foreign
    key check on its new parent's row) and the scheduling cycle's usage_decay.record (every queue's row, in name
    order) deadlocked: "scheduling cycle N failed ... deadlock detected". The record now takes the tree's lock
    shared before any queue row, so the two run one after the other. Ordered, not raced (as
    test_queue_tree_lock.py): the move stops before its commit; the record starts on its own connection, and the
    move commits only once the record waits on a lock."""
    from gpuplatform import services
    from gpuplatform.models import Queue, Team
    from gpuplatform.scheduling import usage_decay

    team = Team.objects.get(name="alpha")
    services.create_queue("aa-parent", team=team)  # sorts before the moved queue: the record locks it first
    moved = services.create_queue("zz-moved", team=team)
    clock = timezone.now()
    config = dataclasses.replace(usage_decay.default_config(), usage_half_life=3600)

    def move():  # as the API's PATCH /queues/<name>/ {"parent": ...} (api/views/queues.py _update)
        services.lock_queue_tree()
        queue = Queue.objects.select_for_update(no_key=True).get(pk=moved.pk)
        services.update_queue(queue, parent="aa-parent")

    out = ordered(move, lambda: usage_decay.record({"zz-moved": {"H100": 1.0}}, clock, config))
    assert "first_error" not in out and "error" not in out, out
    assert out["result"] == Queue.objects.count()
    row = Queue.objects.get(pk=moved.pk)
    assert row.parent.name == "aa-parent" and row.recent_usage_at == clock and row.recent_usage
