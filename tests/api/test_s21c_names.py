"""Trial 21, F9: queue `Alpha` could be created next to `alpha`. Queue names follow the team names' rule
(models.tenancy.canonical_key: letter case and '.', '_', '-' ignored), in the API, the admin, the cluster loader and
every caller of services.create_queue: a clash is a 400 on `name` naming the existing queue and the rule; queues
stored before the rule are kept and warned about on the admin's queues list. Node names (host names) get the same
kind of rule where it applies: letter case (RFC 4343), not separators."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Node, Queue

INVENTORY = {"flavor": "H100", "gpus": [{"index": i} for i in range(2)]}


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["Alpha", "ALPHA", "al-pha", "a.l_pha", "AlPhA"])
def test_a_queue_named_like_another_is_a_400_naming_it(admin, cluster, name):
    r = admin.post("/api/v1/queues/", {"name": name, "parent": "root"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["name"], r.content
    message = r.json()["name"][0]
    assert message.startswith("a queue named 'alpha' already exists: queue names that differ only in letter "
                              "case"), message
    assert not Queue.objects.filter(name=name).exists()


@pytest.mark.django_db
def test_an_exact_name_is_refused_as_before_and_a_name_of_its_own_is_taken(admin, cluster):
    r = admin.post("/api/v1/queues/", {"name": "alpha", "parent": "root"}, format="json")
    assert r.status_code == 400 and "a queue named 'alpha' already exists" in r.json()["name"][0]
    assert admin.post("/api/v1/queues/", {"name": "alpha2", "parent": "root"}, format="json").status_code == 201


@pytest.mark.django_db
def test_the_service_the_loader_and_the_admin_refuse_it_too(cluster, users, client):
    from clusterspec.spec import ClusterSpec, QueueSpec

    with pytest.raises(services.ValidationError) as exc:
        services.create_queue("BETA", parent="root")
    assert "'beta'" in exc.value.errors["name"]
    spec = ClusterSpec(name="more", nodes=(), queues=(QueueSpec("Be-ta", parent="root"),))
    with pytest.raises(services.ValidationError) as exc:
        services.load_cluster_spec(spec)
    assert "'beta'" in exc.value.errors["queues[Be-ta].name"]
    users["staff"].is_superuser = True
    users["staff"].save()
    client.force_login(users["staff"])
    r = client.post("/admin/gpuplatform/queue/add/", {"name": "Beta", "parent": Queue.objects.get(name="root").pk,
                                                      "weight": "1", "state": "open",
                                                      "preemption_grace_seconds": "30"})
    assert r.status_code == 200 and "a queue named &#x27;beta&#x27; already exists" in r.content.decode()
    assert not Queue.objects.filter(name="Beta").exists()


@pytest.mark.django_db
def test_queues_stored_before_the_rule_are_kept_and_warned_about(cluster, users, client):
    Queue.objects.create(name="Alpha", parent=Queue.objects.get(name="root"))  # as before the rule (no service)
    assert len(services.queue_clashes()) == 1 and "'alpha', 'Alpha'" in services.queue_clashes()[0]
    users["staff"].is_superuser = True
    users["staff"].save()
    client.force_login(users["staff"])
    page = client.get("/admin/gpuplatform/queue/").content.decode()
    assert "are one queue by the rule" in page
    assert Queue.objects.filter(name__in=("alpha", "Alpha")).count() == 2


@pytest.mark.django_db
def test_a_node_registering_under_another_nodes_name_but_for_case_is_refused(admin, cluster):
    r = admin.post("/api/v1/nodes/register/", {"name": "N0", **INVENTORY}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["name"], r.content
    assert "a node named 'n0' is registered already" in r.json()["name"][0]
    assert not Node.objects.filter(name="N0").exists()
    assert admin.post("/api/v1/nodes/register/", {"name": "n-0", **INVENTORY}, format="json").status_code in (200, 201)
    assert admin.post("/api/v1/nodes/register/", {"name": "n0", **INVENTORY}, format="json").status_code in (200, 201)


@pytest.mark.django_db
def test_the_admin_refuses_a_node_rename_into_another_nodes_name_but_for_case(cluster, users, client):
    users["staff"].is_superuser = True
    users["staff"].save()
    client.force_login(users["staff"])
    node = Node.objects.get(name="n1")
    r = client.post(f"/admin/gpuplatform/node/{node.pk}/change/", {"name": "N0", "labels": "{}",
                                                                   "gpus-TOTAL_FORMS": "0",
                                                                   "gpus-INITIAL_FORMS": "0"})
    assert r.status_code == 200 and "a node named &#x27;n0&#x27; is registered already" in r.content.decode(), \
        r.content.decode()[:3000]
    assert Node.objects.get(pk=node.pk).name == "n1" and not Event.objects.filter(kind="node_renamed").exists()


@pytest.mark.django_db
def test_a_queue_named_by_another_spelling_is_unknown_with_a_hint(client_for, cluster):
    r = client_for("member").post("/api/v1/jobs/", {"name": "j", "queue": "ALPHA", "command": ["sleep", "1"],
                                                    "roles": [{"tasks": 1, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 400 and r.json() == {"queue": ["unknown queue 'ALPHA' (did you mean 'alpha'?)"]}, r.content
