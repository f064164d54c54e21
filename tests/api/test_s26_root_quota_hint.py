"""The root queues' sum refusal says what lets it pass, as the children's-sum refusal does (": lower another queue's
quota first, or raise <parent>'s", test_s25h_quota_sum_hint): at the root level there is no parent quota to raise,
the cluster's GPUs of the flavor are the bound, so ": lower another queue's quota first, or add nodes of <flavor>",
and when the quota alone is more than the cluster has, only more of the flavor helps. One message (quota_rules
.check_root_capacity), so the quota and queue APIs, gpuctl, the admin and the what-if say it."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Queue

pytestmark = pytest.mark.django_db

HINT = ": lower another queue's quota first, or add nodes of H100"


def _refusal(call) -> str:
    with pytest.raises(services.ValidationError) as exc:
        call()
    return next(iter(exc.value.errors.values()))


def test_a_raise_past_the_cluster_names_both_ways_out_and_both_work(cluster):
    top = services.create_queue("top", quotas={"H100": (0, 0, None)})  # root has the cluster's 32 of 32
    message = _refusal(lambda: services.set_quota(top, "H100", 0, 1, None))
    assert message == "root queues' quotas would sum to 33, above the cluster's 32 H100 GPUs" + HINT
    # way out 1: lower another queue's quota first
    root = Queue.objects.get(name="root")
    services.set_quota(Queue.objects.get(name="beta"), "H100", 0, 15, None)
    services.set_quota(root, "H100", 0, 31, None)
    services.set_quota(top, "H100", 0, 1, None)
    # way out 2: add nodes of the flavor
    assert _refusal(lambda: services.set_quota(top, "H100", 0, 9, None)).endswith(HINT)
    services.register_node("extra", flavor="H100", gpus=[{"index": i, "uuid": f"GPU-extra-{i}"} for i in range(8)])
    services.set_quota(top, "H100", 0, 9, None)
    assert Queue.objects.get(name="top").quotas.get(flavor="H100").quota == 9


def test_a_quota_alone_above_the_cluster_names_only_more_of_the_flavor(cluster):
    message = _refusal(lambda: services.set_quota(Queue.objects.get(name="root"), "H100", 0, 40, None))
    assert message == ("root queues' quotas would sum to 40, above the cluster's 32 H100 GPUs: add nodes of H100 "
                       "first (this quota alone, 40, is more than the cluster has)")
    message = _refusal(lambda: services.create_queue("slices", quotas={"H100/mig-1g.10gb": (0, 1, None)}))
    assert message == ("root queues' quotas would sum to 1, above the cluster, which has no H100/mig-1g.10gb GPUs: "
                       "add 1g.10gb MIG instances on H100 GPUs first (this quota alone, 1, is more than the cluster "
                       "has)")


def test_a_move_to_the_top_and_a_grouping_root_say_it_too(cluster):
    message = _refusal(lambda: services.update_queue(Queue.objects.get(name="alpha"), parent=None))
    assert "root queues' quotas would sum to 48, above the cluster's 32 H100 GPUs" + HINT in message, message
    services.create_queue("group")  # a root queue with no quota: claims its children's quotas in the root sum
    message = _refusal(lambda: services.create_queue("inner", parent="group", quotas={"H100": (0, 1, None)}))
    assert message == ("root queues' quotas would sum to 33, above the cluster's 32 H100 GPUs (group has no quota: it "
                       "claims its children's quotas in the root queues' sum)" + HINT)


def test_the_what_if_says_it(admin):
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "set_quota", "queue": "root", "flavor": "H100",
                                                      "quota": 40, "limit": None}]}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["changes[0].quota"][0].endswith("add nodes of H100 first (this quota alone, 40, is more than the "
                                                    "cluster has)"), r.content
