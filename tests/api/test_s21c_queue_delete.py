"""Trial 21, F8: DELETE /api/v1/queues/<name>/ (documented in docs/quotas.md and docs/api.md) deletes an empty leaf
queue through services.delete_queue, audited; a queue with child queues or jobs is a 400 naming the rule and loses
nothing. The admin's delete goes through the same service."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Job, Queue, Quota, Team

SLEEP = ["sleep", "3600"]


@pytest.mark.django_db
def test_delete_an_empty_leaf_queue_over_the_api(admin, cluster):
    services.create_queue("scratch", parent="root", team=Team.objects.get(name="beta"), quotas={"H100": (0, 0, 4)})
    r = admin.delete("/api/v1/queues/scratch/")
    assert r.status_code == 204, r.content
    assert not Queue.objects.filter(name="scratch").exists()
    assert not Quota.objects.filter(queue__name="scratch").exists()
    event = Event.objects.get(kind="queue_deleted")
    assert event.data == {"queue": "scratch", "parent": "root"} and event.actor.username == "admin"
    assert admin.delete("/api/v1/queues/scratch/").status_code == 404


@pytest.mark.django_db
def test_delete_of_a_queue_with_jobs_or_children_is_a_400_naming_the_rule(admin, users, cluster):
    alpha = Queue.objects.get(name="alpha")
    job = services.submit_job(command=SLEEP, team=alpha.team, queue="alpha", name="j",
                              roles=[{"tasks": 1, "gpus_per_task": 1}], submitter=users["member"])
    r = admin.delete("/api/v1/queues/alpha/")
    assert r.status_code == 400 and list(r.json()) == ["jobs"], r.content
    assert "1 pending or running job(s)" in r.json()["jobs"][0]
    services.cancel_job(job)
    r = admin.delete("/api/v1/queues/alpha/")
    assert r.status_code == 400 and "close the queue instead" in r.json()["jobs"][0], r.content
    r = admin.delete("/api/v1/queues/root/")
    assert r.status_code == 400 and "child queues" in r.json()["children"][0], r.content
    assert Queue.objects.filter(name__in=("alpha", "root")).count() == 2 and Job.objects.filter(pk=job.pk).exists()
    assert not Event.objects.filter(kind="queue_deleted").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["team_admin", "member", "viewer", "anonymous"])
def test_only_platform_admins_delete_queues(client_for, cluster, role):
    services.create_queue("scratch", parent="root", team=Team.objects.get(name="alpha"))
    r = client_for(role).delete("/api/v1/queues/scratch/")
    assert r.status_code in (401, 403, 404), (role, r.status_code)
    assert Queue.objects.filter(name="scratch").exists()


@pytest.mark.django_db
def test_the_admin_deletes_an_empty_queue_and_keeps_one_with_children(users, cluster, client):
    client.force_login(users["staff"])
    users["staff"].is_superuser = True
    users["staff"].save()
    scratch = services.create_queue("scratch", parent="root", team=Team.objects.get(name="beta"))
    r = client.post(f"/admin/gpuplatform/queue/{scratch.pk}/delete/", {"post": "yes"})
    assert r.status_code == 302 and not Queue.objects.filter(name="scratch").exists()
    assert Event.objects.filter(kind="queue_deleted", data__queue="scratch").exists()
    root = Queue.objects.get(name="root")
    r = client.post("/admin/gpuplatform/queue/", {"action": "delete_selected", "_selected_action": [root.pk],
                                                  "post": "yes"}, follow=True)
    assert Queue.objects.filter(name="root").exists()
    assert "Cannot delete queue" in r.content.decode()  # its children are protected rows: Django's own refusal
