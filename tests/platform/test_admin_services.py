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
