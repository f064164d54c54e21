"""Admin writes go through the services: validated (form errors), audited (events)."""
from __future__ import annotations

import pytest

from gpuplatform.models import Event, Job, Node, Queue, Quota


@pytest.fixture
def staff(admin_client, cluster):
    return admin_client


def test_admin_quota_change_is_validated_and_audited(staff):
    quota = Quota.objects.get(queue__name="alpha")
    url = f"/admin/gpuplatform/quota/{quota.pk}/change/"
    bad = staff.post(url, {"guarantee": 0, "quota": 17, "limit": 32})  # siblings would exceed root's 32
    assert bad.status_code == 200 and "above the parent" in bad.content.decode()
    assert Quota.objects.get(pk=quota.pk).quota == 16 and not Event.objects.filter(kind="quota_changed").exists()
    ok = staff.post(url, {"guarantee": 2, "quota": 12, "limit": 24})
    assert ok.status_code == 302
    assert Quota.objects.filter(pk=quota.pk).values_list("guarantee", "quota", "limit").get() == (2, 12, 24)
    assert Event.objects.get(kind="quota_changed").actor.is_superuser


def test_admin_queue_cycle_refused(staff):
    root = Queue.objects.get(name="root")
    alpha = Queue.objects.get(name="alpha")
    response = staff.post(f"/admin/gpuplatform/queue/{root.pk}/change/",
                          {"parent": alpha.pk, "weight": 1, "state": "open"})
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
