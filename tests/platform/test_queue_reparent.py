"""New-user trial 11, F2: moving a queue to a new parent (update_queue(parent=), the queue API's PATCH `parent`,
the admin's queue form) is checked by the quota rules of a quota change at the new place (quota_rules.check_parent):
a queue with quota 16 went under a parent with quota 10, with a limit above the new parent's, and a root
queue's move to the top went past the cluster's GPUs."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Queue
from gpuplatform.services import ValidationError


def _moves(queue_name):
    return Event.objects.filter(kind="queue_updated", queue__name=queue_name).count()


def test_move_under_a_parent_whose_quota_the_children_exceed_is_refused(cluster):
    alpha = Queue.objects.get(name="alpha")  # H100 quota 16
    services.set_quota(Queue.objects.get(name="beta"), "H100", 0, 6, None)  # room in root (32) for small's 10
    small = services.create_queue("small", parent="root", quotas={"H100": (0, 10, None)})
    with pytest.raises(ValidationError) as exc:
        services.update_queue(alpha, parent=small)
    message = exc.value.errors["parent"]
    assert "moving alpha under small" in message and "sum to 16, above the parent queue's quota (10)" in message
    assert Queue.objects.get(name="alpha").parent.name == "root" and _moves("alpha") == 0


def test_move_under_a_parent_with_quotas_but_none_of_the_flavor_is_refused(cluster):
    """A parent with quotas, none for H100, hands down none of it (the rule create_queue applies)."""
    services.create_queue("other", parent="root", quotas={"A100": (0, 0, None)})
    with pytest.raises(ValidationError) as exc:
        services.update_queue(Queue.objects.get(name="beta"), parent="other")
    assert "above the parent queue's quota (0)" in exc.value.errors["parent"]


def test_move_under_a_parent_with_a_lower_limit_is_refused_for_the_subtree_too(cluster):
    """alpha's own limit (32) and a grandchild's limit are both checked against the new parent's limit."""
    services.set_quota(Queue.objects.get(name="beta"), "H100", 0, 0, None)
    capped = services.create_queue("capped", parent="root", quotas={"H100": (0, 16, 20)})
    with pytest.raises(ValidationError) as exc:
        services.update_queue(Queue.objects.get(name="alpha"), parent=capped)
    assert "limit (32) is above the parent queue's limit (20)" in exc.value.errors["parent"]
    # a queue with no limit of its own whose child has one: the child's limit is checked
    mid = services.create_queue("mid", parent="root", quotas={"H100": (0, 0, None)})
    services.create_queue("leaf", parent=mid, quotas={"H100": (0, 0, 30)})
    with pytest.raises(ValidationError) as exc:
        services.update_queue(mid, parent=capped)
    assert "queue leaf's limit (30) is above the parent queue's limit (20)" in exc.value.errors["parent"]
    assert Queue.objects.get(name="mid").parent.name == "root"


def test_move_to_the_top_counts_against_the_cluster(cluster):
    """root has quota 32 of the cluster's 32 H100: alpha (16) made a root queue would sum to 48."""
    with pytest.raises(ValidationError) as exc:
        services.update_queue(Queue.objects.get(name="alpha"), parent=None)
    assert "root queues' quotas would sum to 48, above the cluster's 32 H100 GPUs" in exc.value.errors["parent"]


def test_a_move_that_keeps_the_rules_is_saved_and_audited(cluster):
    roomy = services.create_queue("roomy", parent="root", quotas={"H100": (0, 0, None)})
    services.set_quota(Queue.objects.get(name="alpha"), "H100", 0, 0, 32)
    services.update_queue(Queue.objects.get(name="alpha"), parent=roomy)
    assert Queue.objects.get(name="alpha").parent.name == "roomy"
    assert Event.objects.filter(kind="queue_updated", queue__name="alpha").latest("id").data["parent"] == "roomy"
    # keeping the same parent is no move: nothing to check
    services.update_queue(Queue.objects.get(name="alpha"), parent=roomy, weight=2)


def test_admin_queue_form_shows_the_move_rule_on_parent(cluster):
    from gpuplatform.admin import QueueForm

    services.set_quota(Queue.objects.get(name="beta"), "H100", 0, 6, None)
    small = services.create_queue("small", parent="root", quotas={"H100": (0, 10, None)})
    alpha = Queue.objects.get(name="alpha")
    form = QueueForm(instance=alpha, data={"name": "alpha", "parent": small.pk, "team": alpha.team_id, "weight": 1,
                                           "state": "open", "preemption_grace_seconds": 30,
                                           "version": services.queue_version(alpha)})
    assert not form.is_valid()
    assert any("above the parent queue's quota (10)" in e for e in form.errors["parent"])
