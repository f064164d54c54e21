"""queries.queue_quotas: the one lookup of a queue's quota summed over GPU flavors (the API's queue usage,
the cluster page, the samples behind the watermark charts and the topology map's borrowing all read it)."""
from __future__ import annotations

from gpuplatform import queries, services
from gpuplatform.models import Queue


def test_totals_over_flavors_and_no_cap_when_a_flavor_has_none(cluster):
    alpha, beta = Queue.objects.get(name="alpha"), Queue.objects.get(name="beta")
    services.register_node("a0", flavor="A100", gpus=[{"index": i} for i in range(8)])
    services.set_quota(Queue.objects.get(name="root"), "A100", 0, 8, 8)
    services.set_quota(alpha, "A100", 1, 2, 4)
    services.set_quota(beta, "A100", 0, 4, 8)
    quotas = queries.queue_quotas()
    assert quotas[alpha.pk] == queries.QuotaTotals(guarantee=5, quota=18, limit=36)
    assert quotas[beta.pk] == queries.QuotaTotals(guarantee=0, quota=20, limit=None)  # H100 has no cap of its own
    spare = services.create_queue("spare", parent="root")
    assert spare.pk not in quotas and queries.NO_QUOTA.limit is None
    usage = {u.queue: u for u in queries.queue_usage()}
    assert (usage["alpha"].quota, usage["alpha"].limit, usage["beta"].limit) == (18, 36, None)



def test_limit_shown_is_the_one_enforced_whatever_the_flavor_mix(cluster, settings, django_user_model):
    """Trial 9 F1: a quota row for a flavor no node has (quota 0, no limit: `gpuctl set-quota t9q h100
    --quota 0`) made the total unbounded on the Cluster page, the queues CSV and /metrics, while the
    scheduler enforces the limit of the flavor the nodes have. A flavor no node has adds nothing; a flavor
    the nodes have with no row (or no limit) leaves the queue uncapped, as the engine treats it."""
    import csv
    import io

    from rest_framework.test import APIClient

    from gpuplatform.scheduling import store

    settings.REDIS_URL = ""
    from gpuplatform.models import Team

    t9q = services.create_queue("t9q", parent="root", team=Team.objects.get(name="beta"),
                                quotas={"H100": (0, 0, 20)})
    services.set_quota(t9q, "B200", 0, 0, None)  # accepted: nodes of that flavor may join later (h100,
    # the trial's typo, is now refused as a case-only variant of H100: trial 19, F7)
    assert queries.queue_quotas()[t9q.pk].limit == 20
    store.run_cycle_once()
    admin = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_login(admin)
    assert {u.queue: u.limit for u in client.get("/cluster/").context["queue_usage"]}["t9q"] == 20
    rows = csv.DictReader(io.StringIO(client.get("/queues/data.json?format=csv").content.decode()))
    assert {r["limit"] for r in rows if r["queue"] == "t9q"} == {"20"}
    assert 'gpuplatform_queue_limit_gpus{queue="t9q",team="beta"} 20.0' in APIClient().get("/metrics").content.decode()

    services.register_node("a0", flavor="A100", gpus=[{"index": i} for i in range(8)])
    assert queries.queue_quotas()[t9q.pk].limit is None  # no A100 row: the engine caps nothing there
    services.set_quota(Queue.objects.get(name="root"), "A100", 0, 0, 8)
    services.set_quota(t9q, "A100", 0, 0, 6)
    assert queries.queue_quotas()[t9q.pk].limit == 26
