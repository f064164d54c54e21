"""gpuplatform/services/node_states.py: the node state machine every caller goes through (cordon, drain,
uncordon, heartbeats, failure detection)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform.errors import ValidationError
from gpuplatform.models import Event, Node
from gpuplatform.services.node_states import TRANSITIONS, transition

T = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def test_the_table_lets_a_silent_node_go_not_ready_from_every_state_that_takes_heartbeats():
    # A node in repair or being validated is out of service by an admin's decision (docs/diagnosis.md): its
    # silence is expected there (powered off for repair) and must not overwrite the repair state.
    states = set(Node.State.values) - {"in_repair", "validating"}
    assert {(a, b) for a, b in TRANSITIONS if b == "not_ready"} == {(s, "not_ready") for s in states - {"not_ready"}}
    assert all(a != b for a, b in TRANSITIONS)


@pytest.mark.parametrize("start, to", [("ready", "ready"), ("cordoned", "cordoned"), ("draining", "cordoned"),
                                       ("not_ready", "draining")])
def test_a_move_the_table_refuses_changes_nothing(cluster, start, to):
    Node.objects.filter(name="n0").update(state=start, resume_state="ready" if start == "not_ready" else "")
    node = Node.objects.get(name="n0")
    with pytest.raises(ValidationError) as exc:
        transition(node, to)
    assert "state" in exc.value.errors and Node.objects.get(name="n0").state == start
    assert not Event.objects.filter(node=node).exists()


def test_not_ready_keeps_the_state_it_left_and_returns_only_there(cluster):
    node = Node.objects.get(name="n1")
    assert transition(node, "draining", reason="disk") and transition(node, "not_ready", at=T)
    assert Node.objects.filter(name="n1").values_list("state", "resume_state").get() == ("not_ready", "draining")
    with pytest.raises(ValidationError):
        transition(node, "ready")  # it was draining: a heartbeat brings it back draining
    assert transition(node, "draining", reason="heartbeat", at=T + timedelta(seconds=5))
    assert Node.objects.filter(name="n1").values_list("state", "resume_state").get() == ("draining", "")
    kinds = list(Event.objects.filter(node=node).order_by("id").values_list("kind", "message"))
    assert kinds == [("drained", "n1: ready -> draining (disk)"), ("node_not_ready", "n1: draining -> not_ready"),
                     ("node_ready", "n1: not_ready -> draining (heartbeat)")]


def test_a_stale_compare_and_set_writes_nothing(cluster):
    node = Node.objects.get(name="n2")
    Node.objects.filter(pk=node.pk).update(last_heartbeat=T)
    assert not transition(node, "not_ready", only_if={"last_heartbeat": T - timedelta(seconds=1)})
    assert Node.objects.get(pk=node.pk).state == "ready" and not Event.objects.filter(node=node).exists()
