"""A node's state and the one place it changes (models/cluster.py Node.state).

    ready      takes new work
    cordoned   takes no new work; running work continues (cordon, by an admin)
    draining   takes no new work; its running gangs are evicted gracefully, then requeued (drain)
    not_ready  no heartbeat for HEARTBEAT_TIMEOUT_SECONDS (failure detection); `resume_state` keeps the
               state it had, and its next heartbeat returns it there: a cordoned node comes back cordoned
    in_repair  taken out of service for repair by an admin (from cordoned or draining)
    validating repaired; its agent runs the validation check (NVML sane, every GPU visible, optional
               check command) and the topology audit; passing -> ready, failing -> in_repair

The repair path (docs/diagnosis.md): cordoned -> in_repair -> validating -> ready, each step an Event
(diagnosis/health.py: start_repair, start_validation, record_validation).

Every change is a row of TRANSITIONS, written by `transition` with its Event. The callers: the node
services (cordon, drain, uncordon: nodes.py), a heartbeat (nodes.record_heartbeat) and failure detection
(gpuplatform/scheduling/failures.py). Nothing else writes Node.state (tests/platform/test_layers.py).
"""
from __future__ import annotations

from datetime import datetime

from .. import clock
from ..audit import record_event
from ..errors import ValidationError
from ..models import Node

__all__ = ["TRANSITIONS", "transition"]

READY, CORDONED, DRAINING, NOT_READY = (Node.State.READY, Node.State.CORDONED, Node.State.DRAINING,
                                        Node.State.NOT_READY)
IN_REPAIR, VALIDATING = Node.State.IN_REPAIR, Node.State.VALIDATING

# (from, to) -> the Event kind that records it.
TRANSITIONS: dict[tuple[str, str], str] = {
    (READY, CORDONED): "cordoned",
    (READY, DRAINING): "drained",
    (CORDONED, DRAINING): "drained",
    (CORDONED, READY): "uncordoned",
    (DRAINING, READY): "uncordoned",
    (READY, NOT_READY): "node_not_ready",
    (CORDONED, NOT_READY): "node_not_ready",
    (DRAINING, NOT_READY): "node_not_ready",
    (NOT_READY, READY): "node_ready",  # to its resume_state only
    (NOT_READY, CORDONED): "node_ready",
    (NOT_READY, DRAINING): "node_ready",
    (CORDONED, IN_REPAIR): "repair_started",
    (DRAINING, IN_REPAIR): "repair_started",
    (IN_REPAIR, VALIDATING): "validation_started",
    (VALIDATING, READY): "validation_passed",
    (VALIDATING, IN_REPAIR): "validation_failed",
}

VERBS = {CORDONED: "cordon", DRAINING: "drain", READY: "uncordon", IN_REPAIR: "start a repair",
         VALIDATING: "validate"}  # how a refusal names the move


def transition(node: Node, to: str, *, reason: str = "", actor=None, at: datetime | None = None,
               only_if: dict | None = None, data: dict | None = None) -> bool:
    """Move `node` to state `to` with an Event (kind from TRANSITIONS; time `at`, default the cluster clock).

    Writes when (`at`) and why (`reason`, at most 300 characters) the node entered the state: Node.state_since,
    Node.state_reason, which the API and the nodes page show (a not_ready node: since when, "heartbeat missed: ...").
    The state it leaves is read from the row, never taken from `node`, which may be stale. Raises
    ValidationError("state") for a move the table does not allow (and for a not_ready node sent anywhere
    but its resume_state). Going not_ready keeps the state left in `resume_state`; coming back clears it.
    The write is a compare-and-set on the state read and on `only_if` ({field: value}, e.g. the heartbeat
    the caller judged): returns False, writing nothing, when the row changed meanwhile. Sets `node.state`.
    """
    row = Node.objects.filter(pk=node.pk).values_list("state", "resume_state").first()
    old, resume = row if row else (None, "")
    kind = TRANSITIONS.get((old, to))
    if kind is None or (old == NOT_READY and to != (resume or READY)):
        raise ValidationError({"state": f"node {node.name} is {old}; cannot {VERBS.get(to, 'go ' + str(to))}"})
    when = at or clock.now()
    update = {"state": to, "state_since": when, "state_reason": (reason or "")[:300]}
    if to == NOT_READY:
        update["resume_state"] = old
    elif old == NOT_READY:
        update["resume_state"] = ""
    if not Node.objects.filter(pk=node.pk, state=old, **(only_if or {})).update(**update):
        return False
    node.state, node.state_since, node.state_reason = to, when, update["state_reason"]
    if "resume_state" in update:
        node.resume_state = update["resume_state"]
    record_event(kind, f"{node.name}: {old} -> {to}" + (f" ({reason})" if reason else ""), actor=actor, node=node,
                 time=when, data={"from": old, "to": to, "reason": reason, **(data or {})})
    return True


def set_resume_state(node_id: int, resume: str, *, reason: str, at: datetime) -> None:
    """Set the state a not_ready node resumes when it reports again (Node.State.CORDONED or DRAINING: it
    comes back out of service), with its health reason (at most 300 characters) since `at`. Never weakens a
    pending drain to a cordon. The caller writes the Event that says why (a health rule's)."""
    if resume not in (Node.State.CORDONED, Node.State.DRAINING):
        raise ValidationError({"resume_state": f"a node can resume only cordoned or draining, not {resume!r}"})
    rows = Node.objects.filter(pk=node_id, state=Node.State.NOT_READY)
    if resume == Node.State.CORDONED:
        rows = rows.exclude(resume_state=Node.State.DRAINING)
    rows.update(resume_state=resume, health_reason=reason[:300], health_since=at)
