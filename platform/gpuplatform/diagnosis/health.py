"""Node health rules acting on a node's signals, the repair path and the topology audit (docs/diagnosis.md).

- `judge_gpu_signals(node, gpus, at=)`: each reported GPU's signals ({"index", "xids", "ecc_uncorrected_volatile",
  "row_remap_failure", "thermal_slowdown_seconds", "power_slowdown_seconds", "nvlink_down"}) are judged by
  the health rules (tables.health_rules); every rule met writes a `health_rule` Event (once per rule,
  GPU and value within HEALTH_RULE_REPEAT_SECONDS) and each action fired acts: record (the Event
  only), cordon (no new work), drain (its gangs stopped with grace, requeued whole; supersedes cordon),
  fail_tasks (the GPU is marked unhealthy and the gangs with a task on it are requeued now, in this
  request: a fatal GPU fault does not wait for failure detection). Called by services.record_heartbeat.
- The repair path: `start_repair` (cordoned | draining -> in_repair), `start_validation` (in_repair ->
  validating), `record_validation` (validating -> ready when the check passed, else back to in_repair).
  Each step is a node_states transition, hence an Event.
- `audit_topology(node, inventory)`: what the agent reports (GPU count and models, NVLink peers, NUMA nodes)
  against what the platform holds (gpu_count, flavor, domain); the mismatches are kept on the node
  (Node.topology_mismatches) and a node whose NVLink peers contradict its domain is cordoned.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from .. import clock
from ..audit import record_event
from ..errors import ValidationError
from ..models import Event, Gpu, Job, Node, Task
from . import engine, tables

__all__ = ["gpu_signals", "judge_gpu_signals", "fail_gpu_tasks", "start_repair", "start_validation",
           "record_validation", "audit_topology", "validation_check"]


def gpu_signals(report: dict) -> dict:
    """The health-rule signals in one GPU entry of a heartbeat (absent keys are not judged)."""
    out = {}
    if report.get("xids"):
        out["xid"] = [int(x) for x in report["xids"] if isinstance(x, int)]
    if isinstance(report.get("ecc_uncorrected_volatile"), int):
        out["ecc_dbe_volatile"] = report["ecc_uncorrected_volatile"]
    if report.get("row_remap_failure") is not None:
        out["row_remap_failure"] = bool(report["row_remap_failure"])
    for key in ("thermal_slowdown_seconds", "power_slowdown_seconds", "nvlink_down"):
        if isinstance(report.get(key), (int, float)) and not isinstance(report.get(key), bool):
            out[key] = report[key]
    return out


def _recent(node: Node, key: str, at: datetime) -> bool:
    repeat = float(getattr(settings, "HEALTH_RULE_REPEAT_SECONDS", 600))
    return Event.objects.filter(node=node, kind="health_rule", data__key=key,
                                time__gte=at - timedelta(seconds=repeat)).exists()


def judge_gpu_signals(node: Node, gpus: list[dict], *, at: datetime | None = None, actor=None) -> list[dict]:
    """Judge and act (module docstring). Returns [{gpu, rule, action, category}] of the rules that fired."""
    at = at or clock.now()
    _, rules = tables.health_rules()
    fired, actions, failed_gpus = [], [], []
    for report in gpus:
        signals = gpu_signals(report)
        if not signals:
            continue
        for rule in engine.evaluate_health(signals, rules):
            value = signals[rule.signal]
            key = f"{rule.id}:{report.get('index')}:{value}"
            if _recent(node, key, at):
                continue
            fired.append({"gpu": report.get("index"), "rule": rule.id, "action": rule.action, "category": rule.category})
            actions.append(rule.action)
            if rule.action == "fail_tasks":
                failed_gpus.append(report.get("index"))
            record_event("health_rule", f"{node.name}: gpu{report.get('index')} {rule.signal}={value}: rule "
                                        f"{rule.id} -> {rule.action}", time=at, node=node, actor=actor,
                         data={"key": key, "rule": rule.id, "signal": rule.signal, "value": value,
                               "gpu": report.get("index"), "action": rule.action, "category": rule.category,
                               "source": rule.source})
    acted = set(actions) - {"record"}
    if not acted:
        return fired
    reason = "; ".join(f"gpu{f['gpu']} {f['rule']}" for f in fired if f["action"] != "record")[:300]
    if failed_gpus:
        fail_gpu_tasks(node, failed_gpus, at=at, reason=f"GPU failed ({reason})")
    if "drain" in acted:
        take_out(node, Node.State.DRAINING, at=at, reason=f"health rule: {reason}", actor=actor)
    elif "cordon" in acted:
        take_out(node, Node.State.CORDONED, at=at, reason=f"health rule: {reason}", actor=actor)
    return fired


def take_out(node: Node, to: str, *, at: datetime, reason: str, actor=None, data: dict | None = None) -> bool:
    """A ready (or cordoned) node -> cordoned | draining by a health rule, its reason and since when kept;
    a drain stops its gangs with grace. False when the node is in neither state or already there."""
    from ..lifecycle import evict_jobs_on_nodes
    from ..services import node_states

    state = Node.objects.filter(pk=node.pk).values_list("state", flat=True).first()
    if state not in (Node.State.READY, Node.State.CORDONED) or state == to:
        return False
    if not node_states.transition(node, to, reason=reason, actor=actor, at=at, data=data):
        return False
    Node.objects.filter(pk=node.pk).update(health_reason=reason[:300], health_since=at)
    if to == Node.State.DRAINING:
        evict_jobs_on_nodes([node.pk], at=at, kind="evicted", actor=actor, reason=f"node {node.name} drained: {reason}")
    return True


def fail_gpu_tasks(node: Node, indices: list, *, at: datetime, reason: str) -> list:
    """Mark the GPUs unhealthy and requeue every live gang with a task on them (whole, with backoff) once none of
    its processes runs any more (execution.stop_for_fault: stopped now, with the agents' stop grace; trial 20,
    F10); a gang already stopping toward an end or restart ends as its stop says. Returns the job ids requeued
    or stopping toward their requeue."""
    from ..execution.stops import stop_for_fault

    newly = sorted(Gpu.objects.filter(node=node, index__in=indices, health=Gpu.Health.HEALTHY)
                   .values_list("index", flat=True))
    Gpu.objects.filter(node=node, index__in=newly).update(  # keep the agent's reason
        health=Gpu.Health.UNHEALTHY, health_reason=reason[:200])
    if newly:  # the GPUs' health history (the GPU-hour ledger's `down` reads it)
        record_event("gpu_health", f"{node.name}: " + "; ".join(f"gpu{i} healthy -> unhealthy" for i in newly)
                     + f" ({reason[:200]})", time=at, node=node,
                     data={"changes": [{"index": i, "from": "healthy", "to": "unhealthy", "reason": reason[:200]}
                                       for i in newly]})
    jobs = sorted(set(Task.objects.filter(node=node, state__in=Task.ON_NODE_STATES, job__state__in=Job.LIVE_STATES,
                                          allocations__gpu__index__in=indices, allocations__released_at__isnull=True)
                      .values_list("job_id", flat=True)))
    done = []
    for job_id in jobs:
        outcome = stop_for_fault(job_id, at=at, node=node, reason=f"{reason} on {node.name}",
                                 data={"cause": "gpu_failed", "gpus": indices}, spare_for=[node.name])
        if outcome in ("requeued", "stopping"):
            done.append(job_id)
    return done


# ----------------------------------------------------------------------------------------- repair path
@transaction.atomic
def start_repair(node: Node, *, actor=None, reason: str = "", at: datetime | None = None) -> Node:
    """cordoned | draining -> in_repair, once no job holds the node's GPUs. Raises ValidationError("state") from any
    other state, and while a live allocation holds one of its GPUs (services/nodes.refuse_while_gpus_held: drain
    first, or wait for the jobs to end)."""
    from ..services import node_states
    from ..services.nodes import refuse_while_gpus_held

    at = at or clock.now()
    refuse_while_gpus_held(node, Node.State.IN_REPAIR)
    if not node_states.transition(node, Node.State.IN_REPAIR, reason=reason or "repair started", actor=actor, at=at):
        raise ValidationError({"state": f"node {node.name} changed meanwhile; try again"})
    Node.objects.filter(pk=node.pk).update(health_since=at, **({"health_reason": reason[:300]} if reason else {}))
    return node


@transaction.atomic
def start_validation(node: Node, *, actor=None, check_command: list | None = None, at: datetime | None = None) -> Node:
    """in_repair -> validating. Without a check command (none given and no NODE_VALIDATION_COMMAND setting)
    the node's next heartbeat is checked (validation_check); with one, the node's agent runs it and posts
    the result (agent/validation.py), and record_validation decides. Raises ValidationError("state"), also while a
    job holds one of the node's GPUs (services/nodes.refuse_while_gpus_held: the check runs on them)."""
    from ..services import node_states
    from ..services.nodes import refuse_while_gpus_held

    at = at or clock.now()
    if check_command is not None and not (isinstance(check_command, list) and all(isinstance(a, str) for a in check_command)):
        raise ValidationError({"check_command": "check_command must be a list of strings (argv)"})
    refuse_while_gpus_held(node, Node.State.VALIDATING)
    if not node_states.transition(node, Node.State.VALIDATING, reason="validation started", actor=actor, at=at):
        raise ValidationError({"state": f"node {node.name} changed meanwhile; try again"})
    command = check_command or list(getattr(settings, "NODE_VALIDATION_COMMAND", None) or [])
    Node.objects.filter(pk=node.pk).update(validation={"requested_at": at.isoformat(), "check_command": command})
    return node


def validation_check(node: Node, gpus: list[dict]) -> dict:
    """The platform's side of validation from a heartbeat's GPU list: every registered GPU reported,
    every one healthy (NVML read them: sane), and the topology audit clean. {"passed", "problems"}.
    A GPU row the node's registration keeps for its history though the node no longer lists it (Gpu.out_of_service
    "not_reported": gone from NVML, e.g. fallen off the bus) is known to be gone: not counted as missing (trial 18e:
    a node with one could never pass validation). Every other GPU the platform holds must be reported."""
    problems = []
    rows = dict(Gpu.objects.filter(node=node).values_list("index", "out_of_service"))
    have = set(rows)
    expected = {index for index, held in rows.items() if held != Gpu.OutOfService.NOT_REPORTED}
    seen = {g.get("index") for g in gpus}
    if len(have) < node.gpu_count:
        problems.append(f"{len(have)} of {node.gpu_count} GPUs registered")
    missing = sorted(expected - seen)
    if missing:
        problems.append(f"GPUs not reported: {missing}")
    bad = sorted(g.get("index") for g in gpus if g.get("health", "healthy") != "healthy")
    if bad:
        problems.append(f"unhealthy GPUs: {bad}")
    problems += [m["message"] for m in (node.topology_mismatches or [])]
    return {"passed": not problems, "problems": problems}


@transaction.atomic
def record_validation(node: Node, *, passed: bool, detail: str = "", actor=None, at: datetime | None = None) -> Node:
    """validating -> ready (passed: health reason cleared, GPUs healthy again, but for those
    a registration holds out of service: Gpu.out_of_service) or -> in_repair (failed).
    Raises ValidationError("state") when the node is not validating."""
    from ..services import node_states

    at = at or clock.now()
    state = Node.objects.filter(pk=node.pk).values_list("state", flat=True).first()
    if state != Node.State.VALIDATING:
        raise ValidationError({"state": f"node {node.name} is {state}, not validating"})
    to = Node.State.READY if passed else Node.State.IN_REPAIR
    if not node_states.transition(node, to, reason=detail[:200] or ("check passed" if passed else "check failed"),
                                  actor=actor, at=at, data={"passed": passed}):
        raise ValidationError({"state": f"node {node.name} changed meanwhile; try again"})
    validation = {**(Node.objects.get(pk=node.pk).validation or {}), "passed": passed, "detail": detail[:1000],
                  "at": at.isoformat()}
    fields = {"validation": validation}
    if passed:
        fields.update(health_reason="", health_since=None)
        # not a GPU the node's registration holds out of service (one it no longer lists, a MIG layout changed
        # under a job: Gpu.out_of_service): only a registration changes that, as for a heartbeat
        usable = Gpu.objects.filter(node=node, out_of_service=Gpu.OutOfService.NO)
        back = sorted(usable.exclude(health=Gpu.Health.HEALTHY).values_list("index", flat=True))
        usable.update(health=Gpu.Health.HEALTHY, health_reason="")
        if back:
            record_event("gpu_health", f"{node.name}: " + "; ".join(f"gpu{i} unhealthy -> healthy" for i in back)
                         + " (validation passed)", time=at, node=node, actor=actor,
                         data={"changes": [{"index": i, "from": "unhealthy", "to": "healthy", "reason": ""}
                                           for i in back]})
    else:
        fields.update(health_reason=f"validation failed: {detail}"[:300], health_since=at)
    Node.objects.filter(pk=node.pk).update(**fields)
    return node


# ----------------------------------------------------------------------------------------- topology audit
def audit_topology(node: Node, inventory: list[dict], *, at: datetime | None = None, actor=None) -> list[dict]:
    """Compare the agent's inventory ([{index, model, nvlink_peers, numa_node, pci_bus_id}]) with the node's
    row. Mismatches: gpu_count (less the GPUs kept as not reported: Gpu.out_of_service), flavor, NVLink peers
    outside the node (its tier-1 domain holds only this node when the peers are local: a peer bus id that is none of
    its own GPUs contradicts a single-node NVLink domain), NUMA nodes missing. Stores them on the node (an Event when
    they change); a contradiction of the domain cordons a ready node until an admin decides. Returns the mismatches."""
    from ..agent.inventory import flavor_of

    at = at or clock.now()
    node = Node.objects.select_related("domain").get(pk=node.pk)
    found = []
    if inventory:
        # gpu_count counts the GPU rows the registration keeps for their history though the node no longer lists them
        # (Gpu.out_of_service "not_reported"): known to be gone, not expected in the agent's report (trial 18e)
        gone = Gpu.objects.filter(node=node, out_of_service=Gpu.OutOfService.NOT_REPORTED).count()
        if len(inventory) != node.gpu_count - gone:
            found.append({"field": "gpu_count", "message": f"agent reports {len(inventory)} GPUs, platform holds "
                                                           f"{node.gpu_count - gone}"
                                                           + (f" (and {gone} kept as not reported)" if gone else "")})
        models = sorted({flavor_of(g.get("model") or "") for g in inventory if g.get("model")})
        if models and models != [node.flavor]:
            found.append({"field": "flavor", "message": f"agent reports {', '.join(models)}, platform holds {node.flavor}"})
        own = {(g.get("pci_bus_id") or "").lower() for g in inventory}
        foreign = sorted({p.lower() for g in inventory for p in (g.get("nvlink_peers") or []) if p} - own)
        domain_nodes = node.domain.nodes.count() if node.domain_id else 1
        if foreign and domain_nodes <= 1:
            found.append({"field": "nvlink_peers", "message": f"NVLink peers {foreign[:4]} are not GPUs of this node, "
                                                              f"but its domain {node.domain.name if node.domain_id else '-'} "
                                                              f"holds only this node", "cordon": True})
        if any(g.get("numa_node") is None for g in inventory) and any(g.get("numa_node") is not None for g in inventory):
            found.append({"field": "numa_node", "message": "some GPUs report no NUMA node"})
    if found != (node.topology_mismatches or []):
        Node.objects.filter(pk=node.pk).update(topology_mismatches=found)
        record_event("topology_audit", f"{node.name}: " + ("; ".join(m["message"] for m in found) or "topology labels agree"),
                     time=at, node=node, actor=actor, data={"mismatches": found})
    if any(m.get("cordon") for m in found) and node.state == Node.State.READY:
        take_out(node, Node.State.CORDONED, at=at, actor=actor,
                  reason="topology audit: NVLink peers contradict the node's domain (an admin decides)")
    return found
