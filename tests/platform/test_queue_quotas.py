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
