"""New-user trial 25 (HIGH): a queue under a queue with no quota (a grouping node) took any quota, far above its
parent's and the cluster's. The children's-sum rule stopped at a parent with no quota row, while the engine (and
docs/quotas.md) count a grouping node, in its parent's sum, as what its children claim, recursively. The rule
(quota_rules.check_against_tree / check_parent / check_root_capacity, one home for the API, gpuctl, the admin and
the what-if) now checks a child's quota at the nearest ancestor with a quota row, or among the root queues against
the cluster when every ancestor is a grouping node, and counts grouping nodes' children in every sum.

World (the demo's shape): 78 nodes x 8 philly-gpu (624 GPUs), 1 node x 8 A100; root: philly-gpu quota 624, A100
quota 8; under root: prod 500, research 110 (610 philly-gpu in all)."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

FLAVOR = "philly-gpu"


def _world():
    from clusterspec.spec import ClusterSpec, NodeSpec
    from gpuplatform import services
    from gpuplatform.services import issue_api_token

    nodes = tuple(NodeSpec(f"p{i:02d}", FLAVOR, 8) for i in range(78)) + (NodeSpec("a00", "A100", 8),)
    services.load_cluster_spec(ClusterSpec(name="trial25", nodes=nodes))
    services.create_queue("root", quotas={FLAVOR: (0, 624, None), "A100": (0, 8, None)})
    services.create_queue("prod", parent="root", quotas={FLAVOR: (0, 500, None)})
    services.create_queue("research", parent="root", quotas={FLAVOR: (0, 110, None)})
    team = services.create_team("trial")
    admin = get_user_model().objects.create_user("trial-admin", password="pw", is_staff=True, is_superuser=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(admin)[0]}")
    return client, team, admin


def _quotas():
    from gpuplatform.models import Quota

    return sorted(Quota.objects.values_list("queue__name", "flavor", "guarantee", "quota", "limit"))


def _refused(call, field, *words):
    from gpuplatform.services import ValidationError

    with pytest.raises(ValidationError) as exc:
        call()
    message = exc.value.errors.get(field)
    assert message is not None, exc.value.errors
    for w in words:
        assert w in message, message
    return message


@pytest.mark.django_db(transaction=True)
def test_the_trials_sequence_api_and_gpuctl(live_server, capsys):
    """The trial's exact steps: trial25a (no quota) under root, trial25b (10) and trial25c (1) under it; then
    gpuctl set-quota trial25b / trial25c far above root's quota, and another root child up to 624 without trial25a's
    children: each is refused naming the flag and the rule, the tree unchanged."""
    from gpuplatform.cli import main
    from gpuplatform.services import issue_api_token

    client, team, admin = _world()
    r = client.post("/api/v1/queues/", {"name": "trial25a", "parent": "root", "team": team.slug}, format="json")
    assert r.status_code == 201, r.content
    for name, quota in (("trial25b", 10), ("trial25c", 1)):
        r = client.post("/api/v1/queues/", {"name": name, "parent": "trial25a", "quotas": [
            {"flavor": FLAVOR, "guarantee": 0, "quota": quota}]}, format="json")
        assert r.status_code == 201, r.content
    before = _quotas()

    def gpuctl(*argv):
        code = main(["--api", live_server.url, "--token", issue_api_token(admin)[0], *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    for queue, value, total in (("trial25b", "625", 500 + 110 + 625 + 1), ("trial25b", "2147483647", None),
                                ("trial25c", "2147483647", None)):
        code, _, err = gpuctl("set-quota", queue, FLAVOR, "--quota", value)
        assert code == 1, err
        assert "  --quota (quota): children's quotas would sum to " in err, err
        assert "under queue root, the nearest ancestor with a quota, above its quota (624) for philly-gpu" in err, err
        assert "trial25a has no quota: it claims its children's quotas in root's sum" in err, err
        if total is not None:
            assert f"children's quotas would sum to {total} under queue root" in err, err
    # a direct child of root: trial25a's 11 GPUs now count in root's sum (610 + 11 + 4 = 625)
    code, _, err = gpuctl("set-quota", "research", FLAVOR, "--quota", "114")
    assert code == 1 and "--quota (quota): children's quotas would sum to 625, above the parent queue's quota (624) " \
        "for philly-gpu" in err, err
    assert _quotas() == before
    code, out, err = gpuctl("set-quota", "research", FLAVOR, "--quota", "113")  # 624: the rule kept exactly
    assert code == 0, err
    # the API: PATCH of a quota row, a new queue with quotas under the grouping node, a quota on trial25a itself
    from gpuplatform.models import Quota

    row = Quota.objects.get(queue__name="trial25b", flavor=FLAVOR)
    etag = client.get(f"/api/v1/quotas/{row.pk}/")["ETag"]
    r = client.patch(f"/api/v1/quotas/{row.pk}/", {"quota": 11}, format="json", HTTP_IF_MATCH=etag)
    assert r.status_code == 400 and "children's quotas would sum to 625 under queue root" in r.json()["quota"][0], \
        r.content
    r = client.post("/api/v1/queues/", {"name": "trial25d", "parent": "trial25a", "quotas": [
        {"flavor": FLAVOR, "quota": 0}, {"flavor": "A100", "quota": 9}]}, format="json")
    assert r.status_code == 400 and set(r.json()) >= {"quotas[1].quota"}, r.content
    assert "above its quota (8) for A100" in r.json()["quotas[1].quota"][0]
    r = client.post("/api/v1/queues/", {"name": "trial25d", "parent": "trial25a", "quotas": [
        {"flavor": FLAVOR, "quota": 1}]}, format="json")
    assert r.status_code == 400 and "sum to 625 under queue root" in r.json()["quotas[0].quota"][0], r.content
    r = client.post("/api/v1/quotas/", {"queue": "trial25a", "flavor": FLAVOR, "quota": 10}, format="json")
    assert r.status_code == 400 and r.json()["quota"] == ["quota (10) is below the sum of the children's quotas (11)"]
    r = client.post("/api/v1/quotas/", {"queue": "trial25a", "flavor": FLAVOR, "quota": 12}, format="json")
    assert r.status_code == 400 and "sum to 625, above the parent queue's quota (624)" in r.json()["quota"][0]
    r = client.post("/api/v1/quotas/", {"queue": "trial25a", "flavor": FLAVOR, "quota": 11}, format="json")
    assert r.status_code == 201, r.content  # its first row, equal to what it claimed: root's sum unchanged


@pytest.mark.django_db
def test_deeper_nesting_of_grouping_nodes_is_summed_at_every_level():
    """root (624) -> a (no quota) -> b (no quota) -> c: c's quota counts in root's sum through a and b; a's or b's
    first quota must hold what their children claim; the admin and the what-if refuse alike."""
    from gpuplatform import services
    from gpuplatform.admin import QuotaForm
    from gpuplatform.models import Queue
    from gpuplatform.scheduling.forecast import check_quota_changes
    from scheduler.forecast.whatif import WhatIfError

    _world()
    services.create_queue("a", parent="root")
    services.create_queue("b", parent="a")
    message = _refused(lambda: services.create_queue("c", parent="b", quotas={FLAVOR: (0, 15, None)}),
                       f"quotas[{FLAVOR}].quota", "children's quotas would sum to 625 under queue root",
                       "above its quota (624) for philly-gpu", "(b, a have no quota: each claims its children's quotas")
    assert message.endswith("in root's sum): lower another queue's quota first, or raise root's")  # the hint last
    c = services.create_queue("c", parent="b", quotas={FLAVOR: (0, 14, None)})  # 610 + 14 = 624
    _refused(lambda: services.set_quota(c, FLAVOR, 0, 15, None), "quota", "sum to 625 under queue root")
    _refused(lambda: services.create_queue("b2", parent="a", quotas={FLAVOR: (0, 1, None)}),
             f"quotas[{FLAVOR}].quota", "sum to 625 under queue root", "(a has no quota")
    _refused(lambda: services.set_quota(Queue.objects.get(name="research"), FLAVOR, 0, 111, None), "quota",
             "children's quotas would sum to 625, above the parent queue's quota (624)")
    # downward through a grouping child: a's first quota below what b's children claim
    _refused(lambda: services.set_quota(Queue.objects.get(name="a"), FLAVOR, 0, 13, None), "quota",
             "quota (13) is below the sum of the children's quotas (14)")
    _refused(lambda: services.set_quota(Queue.objects.get(name="b"), FLAVOR, 0, 13, None), "quota",
             "quota (13) is below the sum of the children's quotas (14)")
    # the admin's quota form and the what-if's set_quota: the same rule
    form = QuotaForm(data={"queue": c.pk, "flavor": FLAVOR, "guarantee": 0, "quota": 100, "limit": ""})
    assert not form.is_valid() and any("sum to 710 under queue root" in e for e in form.errors["quota"]), form.errors
    with pytest.raises(WhatIfError) as exc:
        check_quota_changes([{"kind": "set_quota", "queue": "c", "flavor": FLAVOR, "quota": 100}])
    assert "sum to 710 under queue root" in str(exc.value)
    # cuts are taken; a's first quota that holds its children is taken, and then bounds them as a parent
    services.set_quota(Queue.objects.get(name="research"), FLAVOR, 0, 100, None)
    services.set_quota(Queue.objects.get(name="a"), FLAVOR, 0, 20, None)
    services.create_queue("b2", parent="a", quotas={FLAVOR: (0, 6, None)})
    _refused(lambda: services.set_quota(c, FLAVOR, 0, 15, None), "quota",
             "children's quotas would sum to 21 under queue a, the nearest ancestor with a quota, above its quota (20)",
             "(b has no quota: it claims its children's quotas in a's sum)")


@pytest.mark.django_db
def test_grouping_root_queues_count_against_the_cluster():
    """A root queue with no quota claims its children's quotas in the root queues' sum against the cluster's GPUs,
    both when one of its children is raised and when another root queue is."""
    from gpuplatform import services
    from gpuplatform.models import Queue

    _world()
    services.create_queue("top")  # a second root queue, no quota
    _refused(lambda: services.create_queue("under-top", parent="top", quotas={FLAVOR: (0, 1, None)}),
             f"quotas[{FLAVOR}].quota", "root queues' quotas would sum to 625, above the cluster's 624 philly-gpu GPUs",
             "(top has no quota: it claims its children's quotas in the root queues' sum)")
    services.set_quota(Queue.objects.get(name="prod"), FLAVOR, 0, 490, None)
    services.set_quota(Queue.objects.get(name="root"), FLAVOR, 0, 614, None)
    leaf = services.create_queue("under-top", parent="top", quotas={FLAVOR: (0, 10, None)})  # 614 + 10 = 624
    _refused(lambda: services.set_quota(Queue.objects.get(name="root"), FLAVOR, 0, 615, None), "quota",
             "root queues' quotas would sum to 625, above the cluster's 624 philly-gpu GPUs")
    _refused(lambda: services.set_quota(leaf, FLAVOR, 0, 11, None), "quota", "root queues' quotas would sum to 625")
    _refused(lambda: services.create_queue("other-top", quotas={FLAVOR: (0, 1, None)}), f"quotas[{FLAVOR}].quota",
             "root queues' quotas would sum to 625")
    # A100: its own sum (root 8 of 8); the grouping root's philly-gpu children claim no A100
    services.set_quota(leaf, "A100", 0, 0, None)
    _refused(lambda: services.create_queue("a100-top", parent="top", quotas={"A100": (0, 1, None)}),
             "quotas[A100].quota", "root queues' quotas would sum to 9, above the cluster's 8 A100 GPUs")


@pytest.mark.django_db
def test_moving_queues_into_and_with_grouping_nodes():
    """Re-parenting: a grouping node brings what its children claim to its new parent's sum; a queue moved under a
    grouping node counts at the nearest ancestor with a quota; a grouping node moved to the top counts against
    the cluster."""
    from gpuplatform import services
    from gpuplatform.models import Queue

    _world()
    services.set_quota(Queue.objects.get(name="prod"), FLAVOR, 0, 480, None)  # root: 590 of 624 claimed
    group = services.create_queue("group", parent="root")
    services.create_queue("g1", parent=group, quotas={FLAVOR: (0, 20, None)})
    services.create_queue("g2", parent=group, quotas={FLAVOR: (0, 10, None)})  # root: 620
    small = services.create_queue("small", parent="prod", quotas={FLAVOR: (0, 25, None)})
    _refused(lambda: services.update_queue(group, parent=small), "parent", "moving group under small",
             "children's quotas would sum to 30, above the parent queue's quota (25) for philly-gpu",
             "(group has no quota: it claims its children's 30)")
    _refused(lambda: services.update_queue(group, parent=None), "parent", "moving group to the top",
             "root queues' quotas would sum to 654, above the cluster's 624 philly-gpu GPUs")
    # a queue with a quota moved under a grouping node under root: root's sum (620 + 5 > 624)
    spare = services.create_queue("spare", parent="prod", quotas={FLAVOR: (0, 5, None)})
    _refused(lambda: services.update_queue(spare, parent=group), "parent", "moving spare under group",
             "children's quotas would sum to 625 under queue root", "(group has no quota")
    # a grouping node moved under another grouping node: its children counted at root, where they already were
    nest = services.create_queue("nest", parent="root")
    services.update_queue(group, parent=nest)
    assert Queue.objects.get(name="group").parent.name == "nest"
    # ... and then out of root's tree into prod's room (480: 25 + 5 claimed), and back
    services.update_queue(Queue.objects.get(name="group"), parent="prod")
    services.update_queue(Queue.objects.get(name="group"), parent=nest)


@pytest.mark.django_db
def test_a_tree_that_already_breaks_the_rule_under_a_grouping_node_takes_cuts():
    """Rows stored before this rule (b and c far above root through a grouping node) are not frozen: a cut is taken,
    a raise refused (docs/quotas.md)."""
    from gpuplatform import services
    from gpuplatform.models import Quota

    _world()
    a = services.create_queue("a", parent="root")
    b = services.create_queue("b", parent=a, quotas={FLAVOR: (0, 10, None)})
    c = services.create_queue("c", parent=a, quotas={FLAVOR: (0, 1, None)})
    Quota.objects.filter(queue=b).update(quota=2147483647)  # as the old rule let it be
    services.set_quota(b, FLAVOR, 0, 625, None)  # a cut toward the rule
    services.set_quota(c, FLAVOR, 0, 0, None)
    _refused(lambda: services.set_quota(c, FLAVOR, 0, 1, None), "quota", "sum to 1236 under queue root")
    services.set_quota(b, FLAVOR, 0, 14, None)
    services.set_quota(c, FLAVOR, 0, 0, None)
