"""Admin writes go through the services: validated (form errors), audited (events)."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Job, Node, Queue, Quota


@pytest.fixture
def staff(admin_client, cluster):
    return admin_client


def test_admin_quota_change_is_validated_and_audited(staff):
    quota = Quota.objects.get(queue__name="alpha")
    url = f"/admin/gpuplatform/quota/{quota.pk}/change/"
    version = services.quota_version(quota)
    bad = staff.post(url, {"guarantee": 0, "quota": 17, "limit": 32, "version": version})  # siblings: above root's 32
    assert bad.status_code == 200 and "above the parent" in bad.content.decode()
    assert Quota.objects.get(pk=quota.pk).quota == 16 and not Event.objects.filter(kind="quota_changed").exists()
    ok = staff.post(url, {"guarantee": 2, "quota": 12, "limit": 24, "version": version})
    assert ok.status_code == 302
    assert Quota.objects.filter(pk=quota.pk).values_list("guarantee", "quota", "limit").get() == (2, 12, 24)
    assert Event.objects.get(kind="quota_changed").actor.is_superuser


def test_admin_queue_cycle_refused(staff):
    root = Queue.objects.get(name="root")
    alpha = Queue.objects.get(name="alpha")
    response = staff.post(f"/admin/gpuplatform/queue/{root.pk}/change/",
                          {"parent": alpha.pk, "weight": 1, "state": "open", "version": services.queue_version(root)})
    assert response.status_code == 200 and "cycle" in response.content.decode()
    assert Queue.objects.get(pk=root.pk).parent is None


def test_admin_node_and_job_actions_use_services(staff, submit):
    node = Node.objects.get(name="n0")
    staff.post("/admin/gpuplatform/node/", {"action": "action_cordon_node", "_selected_action": [node.pk]})
    assert Node.objects.get(pk=node.pk).state == "cordoned"
    job = submit("j")
    staff.post("/admin/gpuplatform/job/", {"action": "action_cancel_job", "_selected_action": [job.pk]})
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    assert {"cordoned", "cancelled"} <= set(Event.objects.values_list("kind", flat=True))


@pytest.mark.parametrize("model", ["team", "membership", "queue", "quota", "domain", "node", "gpu", "job", "task",
                                   "allocation", "event", "schedulercycle", "clustersample", "queuesample"])
def test_admin_changelists_render(staff, model):
    assert staff.get(f"/admin/gpuplatform/{model}/").status_code == 200


# --- new-user trial 10, F1: a stale admin form never overwrites a change made since it was opened ----------

def _version_on_page(html: str) -> str:
    import re

    match = re.search(r'name="version" value="([0-9a-f]+)"', html)
    assert match, "the change form carries no version"
    return match.group(1)


def test_stale_admin_quota_form_is_refused_not_a_lost_update(staff):
    """F1: the admin opened a quota (8/16/32), the API changed quota to 12, the admin saved the stale form
    changing only the limit: it stored 16 again, silently. The form carries the version it was opened with;
    the stale save is a form error naming what happened, nothing is written, and a fresh form saves."""
    quota = Quota.objects.get(queue__name="alpha")
    url = f"/admin/gpuplatform/quota/{quota.pk}/change/"
    opened = _version_on_page(staff.get(url).content.decode())
    services.set_quota(quota.queue, quota.flavor, quota.guarantee, 12, quota.limit)  # the REST change meanwhile
    events = Event.objects.filter(kind="quota_changed").count()
    stale = staff.post(url, {"guarantee": quota.guarantee, "quota": 16, "limit": 24, "version": opened})
    assert stale.status_code == 200 and "changed by someone else since you opened it" in stale.content.decode()
    assert Quota.objects.get(pk=quota.pk).quota == 12 and Event.objects.filter(kind="quota_changed").count() == events
    missing = staff.post(url, {"guarantee": quota.guarantee, "quota": 16, "limit": 24})
    assert missing.status_code == 200 and "carries no version" in missing.content.decode()
    fresh = _version_on_page(staff.get(url).content.decode())  # reloading gives the current one
    ok = staff.post(url, {"guarantee": quota.guarantee, "quota": 12, "limit": 24, "version": fresh})
    assert ok.status_code == 302
    assert Quota.objects.filter(pk=quota.pk).values_list("quota", "limit").get() == (12, 24)


def test_stale_admin_queue_form_is_refused(staff):
    """F1, the queue form (weight, state, grace): the same check."""
    alpha = Queue.objects.get(name="alpha")
    url = f"/admin/gpuplatform/queue/{alpha.pk}/change/"
    opened = _version_on_page(staff.get(url).content.decode())
    services.update_queue(alpha, weight=3)  # the REST change meanwhile
    stale = staff.post(url, {"parent": alpha.parent_id, "weight": 1, "state": "open", "preemption_grace_seconds": 30,
                             "version": opened})
    assert stale.status_code == 200 and "changed by someone else" in stale.content.decode()
    assert Queue.objects.get(pk=alpha.pk).weight == 3
    ok = staff.post(url, {"parent": alpha.parent_id, "weight": 2, "state": "open", "preemption_grace_seconds": 30,
                          "version": _version_on_page(staff.get(url).content.decode())})
    assert ok.status_code == 302 and Queue.objects.get(pk=alpha.pk).weight == 2


def test_service_refuses_a_stale_version_under_the_lock(cluster):
    """F1: a change committed between the form's check and the save (the service's own check, under the row
    lock): set_quota / update_queue with an expected_version that is no longer the row's raise "version"."""
    quota = Quota.objects.get(queue__name="alpha")
    opened = services.quota_version(quota)
    services.set_quota(quota.queue, quota.flavor, quota.guarantee, 12, quota.limit)
    with pytest.raises(services.ValidationError) as exc:
        services.set_quota(quota.queue, quota.flavor, quota.guarantee, 16, 24, expected_version=opened)
    assert "version" in exc.value.errors and "quota 12" in exc.value.errors["version"]
    alpha = Queue.objects.get(name="alpha")
    opened = services.queue_version(alpha)
    services.update_queue(alpha, weight=3)
    with pytest.raises(services.ValidationError) as exc:
        services.update_queue(Queue.objects.get(pk=alpha.pk), weight=2, expected_version=opened)
    assert "weight 3" in exc.value.errors["version"] and Queue.objects.get(pk=alpha.pk).weight == 3


# --- new-user trial 16b, F5: a team deleted in the admin while a queue is created for it -------------------

def test_a_team_is_deleted_through_the_service_and_refused_while_it_holds_queues(staff):
    from django.contrib.auth import get_user_model

    from gpuplatform.models import Membership, Team

    empty = services.create_team("empty-team")
    services.add_member(empty, get_user_model().objects.create_user("member1", password="pw"), "admin")
    alpha = Queue.objects.get(name="alpha").team
    with pytest.raises(services.ValidationError) as refused:
        services.delete_team(alpha)
    assert "team" in refused.value.errors and "1 queue(s)" in str(refused.value)
    assert Team.objects.filter(pk=alpha.pk).exists()
    assert services.delete_team(empty) is True
    assert not Team.objects.filter(pk=empty.pk).exists() and not Membership.objects.filter(team_id=empty.pk).exists()
    assert Event.objects.get(kind="team_deleted").data == {"team": "empty-team", "memberships": 1}
    assert services.delete_team(empty) is False  # gone already (a concurrent delete came first): nothing written
    assert Event.objects.filter(kind="team_deleted").count() == 1


def test_the_admin_delete_page_refuses_a_team_given_a_queue_after_its_check_with_a_message_not_a_500(staff, monkeypatch):
    """The admin's delete page lists what the delete would take (its check) and deletes on the next POST; a queue
    created for the team in between met the database's ProtectedError: a 500. The check is made to see no queue
    here (as it would have before the queue came): the delete is now the service's, refused with a message."""
    from django.contrib.admin import ModelAdmin

    from gpuplatform.models import Team

    team = services.create_team("raced")
    original = ModelAdmin.get_deleted_objects

    def before_the_queue_came(self, objs, request):
        deleted, counts, perms, protected = original(self, objs, request)
        return deleted, counts, set(), []

    services.create_queue("raced-q", team=team)  # what the API created between the page's check and the delete
    monkeypatch.setattr(ModelAdmin, "get_deleted_objects", before_the_queue_came)
    response = staff.post(f"/admin/gpuplatform/team/{team.pk}/delete/", {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert "still has 1 queue(s)" in response.content.decode()
    assert Team.objects.filter(pk=team.pk).exists() and not Event.objects.filter(kind="team_deleted").exists()
    listed = staff.post("/admin/gpuplatform/team/", {"action": "delete_selected", "post": "yes",
                                                      "_selected_action": [team.pk]}, follow=True)
    assert listed.status_code == 200 and "Nothing deleted: team: team raced still has 1 queue(s)" in listed.content.decode()
    assert Team.objects.filter(pk=team.pk).exists()
    empty = services.create_team("empty")
    gone = staff.post(f"/admin/gpuplatform/team/{empty.pk}/delete/", {"post": "yes"})
    assert gone.status_code == 302 and not Team.objects.filter(pk=empty.pk).exists()
    assert Event.objects.get(kind="team_deleted").actor.is_superuser


def test_a_queue_for_a_team_deleted_since_it_was_read_is_refused_on_team(db):
    """The other order of trial 16b's F5: the team is deleted first (delete_team holds the tree's lock), then a
    queue is created for the Team the request had read before: a 400 on `team`, not the foreign key's error at
    commit."""
    from gpuplatform.models import Team

    team = services.create_team("short-lived")
    stale = Team.objects.get(pk=team.pk)
    assert services.delete_team(team)
    with pytest.raises(services.ValidationError) as refused:
        services.create_queue("orphan", team=stale)
    assert refused.value.errors == {"team": "team short-lived no longer exists"}
    assert not Queue.objects.filter(name="orphan").exists()


def test_the_admin_edits_a_nodes_name_domain_and_labels_only_and_shows_its_gpus(staff):
    """Trial 17, F7 and F6: the admin's node form set gpu_count 100 on an 8-GPU node (phantom GPUs in the metrics,
    a 20-GPU job accepted and planned on GPUs that do not exist, stale every cycle) and changed the flavor and CPU
    under running jobs; its GPU form set the sharing mode and memory of a GPU in use, which the sharing API refuses,
    and wrote no Event. What the registration reports is now shown, not edited; the GPU admin is read-only; a node
    joins by registering, not by the admin's add form. Renaming and moving between domains still work."""
    from gpuplatform.models import Domain, Gpu

    node = Node.objects.get(name="n0")
    services.issue_node_agent_token(["n0"])  # its agent's token, scoped to n0
    before = Node.objects.filter(pk=node.pk).values("flavor", "gpu_count", "cpu_milli", "memory_mib").get()
    page = staff.get(f"/admin/gpuplatform/node/{node.pk}/change/").content.decode()
    assert 'name="gpu_count"' not in page and 'name="flavor"' not in page and 'name="name"' in page
    other = Domain.objects.exclude(pk=node.domain_id).filter(tier=node.domain.tier).first()
    saved = staff.post(f"/admin/gpuplatform/node/{node.pk}/change/", {
        "name": "n0-renamed", "domain": other.pk, "labels": "{}", "gpu_count": 100, "flavor": "B200",
        "cpu_milli": 1, "gpus-TOTAL_FORMS": 0, "gpus-INITIAL_FORMS": 0})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    node.refresh_from_db()
    assert (node.name, node.domain_id) == ("n0-renamed", other.pk)
    renamed = Event.objects.get(kind="node_renamed")  # trial 17c, G11: its agents' scopes follow the rename
    assert renamed.data == {"from": "n0", "to": "n0-renamed", "scopes": 1} and renamed.actor.is_superuser
    from gpuplatform.models import NodeAgentScope

    assert NodeAgentScope.objects.get(user__username="agent-n0").nodes == ["n0-renamed"]
    assert Node.objects.filter(pk=node.pk).values("flavor", "gpu_count", "cpu_milli", "memory_mib").get() == before
    assert staff.get("/admin/gpuplatform/node/add/").status_code == 403
    gpu = Gpu.objects.filter(node=node).first()
    assert staff.post(f"/admin/gpuplatform/gpu/{gpu.pk}/change/", {"sharing": "shared", "memory_mib": 1000,
                                                                   "health": "unhealthy"}).status_code == 403
    gpu.refresh_from_db()
    assert (gpu.sharing, gpu.health) == ("exclusive", "healthy")
    assert staff.get(f"/admin/gpuplatform/gpu/{gpu.pk}/change/").status_code == 200  # still shown


def test_the_admin_keeps_a_teams_last_admin_and_audits_memberships(staff):
    """Trial 17, F8: the team form's membership inline demoted and then removed a team's only admin, a rule the API
    keeps (a team keeps at least one admin). Memberships are now changed under Memberships through add_member /
    remove_member (audited; the rule's refusal is a form error or a message); the inline shows them; a team added
    here goes through create_team."""
    from django.contrib.auth import get_user_model

    from gpuplatform.models import Membership, Team

    added = staff.post("/admin/gpuplatform/team/add/", {"name": "gamma", "slug": "gamma", "description": "",
                                                         "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0})
    assert added.status_code == 302 and Event.objects.filter(kind="team_created", data__team="gamma").exists()
    gamma = Team.objects.get(name="gamma")
    boss = get_user_model().objects.create_user("boss", password="pw")
    services.add_member(gamma, boss, "admin")
    only = Membership.objects.get(team=gamma, user=boss)
    page = staff.get(f"/admin/gpuplatform/team/{gamma.pk}/change/").content.decode()
    assert "boss" in page and 'name="memberships-0-role"' not in page  # shown, not edited in the inline
    demote = staff.post(f"/admin/gpuplatform/membership/{only.pk}/change/", {"role": "member"})
    assert demote.status_code == 200 and "last admin" in demote.content.decode()
    removed = staff.post(f"/admin/gpuplatform/membership/{only.pk}/delete/", {"post": "yes"}, follow=True)
    assert "last admin" in removed.content.decode()
    assert Membership.objects.get(pk=only.pk).role == "admin"
    second = get_user_model().objects.create_user("second", password="pw")
    assert staff.post("/admin/gpuplatform/membership/add/", {"user": second.pk, "team": gamma.pk,
                                                               "role": "admin"}).status_code == 302
    assert staff.post(f"/admin/gpuplatform/membership/{only.pk}/change/", {"role": "member"}).status_code == 302
    assert Membership.objects.get(pk=only.pk).role == "member"
    assert Event.objects.filter(kind="member_added", data__user="second").exists()


def test_the_admin_takes_node_labels_by_the_registrations_rule(staff):
    """Trial 17c, G6: labels [1, 2] (or "str", or a nested object) saved in the admin made every later registration
    of the node a 500 ('list' object is not a mapping). The admin takes labels by the registration's rule."""
    node = Node.objects.get(name="n1")
    for bad in ("[1, 2]", '"str"', '{"a": {"b": 1}}', '{"": "x"}'):
        r = staff.post(f"/admin/gpuplatform/node/{node.pk}/change/", {"name": "n1", "labels": bad,
                                                                     "gpus-TOTAL_FORMS": 0, "gpus-INITIAL_FORMS": 0})
        assert r.status_code == 200 and "labels" in r.content.decode(), bad
    ok = staff.post(f"/admin/gpuplatform/node/{node.pk}/change/", {"name": "n1", "labels": '{"zone": "a"}',
                                                                  "gpus-TOTAL_FORMS": 0, "gpus-INITIAL_FORMS": 0})
    assert ok.status_code == 302 and Node.objects.get(pk=node.pk).labels == {"zone": "a"}
    services.register_node("n1", flavor=node.flavor, gpus=[{"index": i} for i in range(node.gpu_count)],
                           labels={"rack": "r1"})
    assert Node.objects.get(pk=node.pk).labels == {"zone": "a", "rack": "r1"}


def test_a_member_added_to_a_team_deleted_since_it_was_read_is_refused_on_team(db):
    """Trial 17c, G7: a membership POST racing the admin's team delete answered a 500 (the foreign key at commit).
    add_member takes the team's members lock, which delete_team holds too, and then finds the team gone: 400."""
    from django.contrib.auth import get_user_model

    from gpuplatform.models import Membership, Team

    team = services.create_team("brief")
    stale = Team.objects.get(pk=team.pk)
    assert services.delete_team(team)
    with pytest.raises(services.ValidationError) as refused:
        services.add_member(stale, get_user_model().objects.create_user("late", password="pw"), "admin")
    assert refused.value.errors == {"team": "team brief no longer exists"}
    assert not Membership.objects.filter(user__username="late").exists()
