"""Validation rules for the queue tree and its quotas (read-only queries; services/queues.py does the writes).

Units: GPUs. Every check returns a dict field -> message (empty when valid) so a service can report all
broken rules of one call at once; services raise `ValidationError` with it.
"""
from __future__ import annotations

from operator import itemgetter

from django.db.models import Sum

from scheduler.forecast.variants import quota_error

from .models import Queue, Quota
from .trees import Tree

Triple = tuple[int, int, "int | None"]


def check_triple(prefix: str, guarantee, quota, limit, changed: frozenset | set | None = None) -> dict[str, str]:
    """guarantee, quota, limit: whole numbers of GPUs from 0 to QUOTA_MAX (scheduler.forecast.variants: one rule
    for the quota API, the admin, the forecast's set_quota and the replay's what-if), guarantee <= quota <= limit
    (limit None = no cap). `changed`: the names a partial update sent (None = all). A rule between two values is
    reported on the one the request changed (PATCH {"limit": 1} under quota 4 -> "limit"), on the smaller one
    otherwise."""
    errors: dict[str, str] = {}
    for name, value in (("guarantee", guarantee), ("quota", quota), ("limit", limit)):
        if value is None and name == "limit":
            continue
        error = quota_error(name, value)
        if error:
            errors[f"{prefix}{name}"] = error
    if errors:
        return errors
    def on(lower: str, upper: str) -> str:
        return upper if changed is not None and upper in changed and lower not in changed else lower

    if guarantee > quota:
        errors[f"{prefix}{on('guarantee', 'quota')}"] = f"guarantee ({guarantee}) must not exceed quota ({quota})"
    if limit is not None and quota > limit:
        errors[f"{prefix}{on('quota', 'limit')}"] = f"quota ({quota}) must not exceed limit ({limit})"
    return errors


FLAVOR_MAX_CHARS = 64


def flavor_error(flavor) -> str | None:
    """The rule of a quota's flavor, or None: one GPU model named by the name rule (names.py: letters, digits,
    '.', '_', '-', as the node agent derives it: 'NVIDIA H200' -> H200), or a MIG profile's resource
    '<model>/mig-<profile>' (1g.18gb). New-user trial 13, F11: 'H200 🚀' and 'H200|A100' were quota flavors,
    the second (a job's "either") never matching a node."""
    from .job_rules import MIG_PROFILE
    from .names import NAME_HELP, NAME_RE

    if not isinstance(flavor, str):
        return "a flavor is a string"
    model, mig, profile = flavor.partition("/mig-")
    if "|" in flavor:
        return (f"a quota is for one GPU flavor; {flavor[:40]!r} names several ('|', either, is for a job's "
                f"flavor only): one quota per flavor")
    if not NAME_RE.match(model) or (mig and not MIG_PROFILE.match(profile)):
        return (f"a flavor is a GPU model that uses {NAME_HELP} (e.g. H200), or <model>/mig-<profile> "
                f"(H200/mig-1g.18gb); {flavor[:40]!r} is not")
    if len(flavor) > FLAVOR_MAX_CHARS:
        return f"a flavor must be at most {FLAVOR_MAX_CHARS} characters"
    return None


def check_flavor(flavor: str, queue_id: int | None = None, field: str = "flavor", quota=0,
                 guarantee=0) -> dict[str, str]:
    """A quota's flavor must follow the flavor rule (flavor_error; not re-checked for a row the queue already
    has), and be a GPU model some node has, or its guarantee and quota must be 0 (set up ahead
    of nodes that have not joined yet). Not checked while the cluster has no nodes at all (being set up),
    nor for a flavor the queue already has a quota row for (its nodes may have left). Reported on `field`,
    so a typo ("nope") reads "unknown flavor", not a sum rule of the tree. A MIG resource
    "<flavor>/mig-<profile>" is known when its GPU model is (its instances are checked by the root rule)."""
    from .models import Node

    if not flavor:
        return {field: "flavor must not be empty"}
    rule = flavor_error(flavor)
    if rule and not (queue_id is not None and Quota.objects.filter(queue_id=queue_id, flavor=flavor).exists()):
        return {field: rule}  # a row stored before the rule can still be changed (or deleted)
    positive = any(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (quota, guarantee))
    if not positive:
        return {}
    known = set(Node.objects.values_list("flavor", flat=True).distinct())
    if not known or flavor in known or flavor.partition("/mig-")[0] in known or \
            (queue_id is not None and Quota.objects.filter(queue_id=queue_id, flavor=flavor).exists()):
        return {}
    return {field: f"unknown flavor {flavor!r}: no node has it (the cluster's GPU flavors: {', '.join(sorted(known))}); "
                   f"until such nodes join, its guarantee and quota can only be 0"}


def flavor_case_error(flavor: str, queue: Queue | None = None, *, also=()) -> str | None:
    """A flavor that differs from one the cluster already spells (a node's flavor, another quota's, or one of `also`:
    the flavors a what-if's add_nodes changes bring before it) only in letter case: flavors are case-sensitive, so
    `h200` next to the nodes' `H200` is a row no job can use (a job asking "h200" is refused "no node of flavor
    h200"): surely a typo, refused naming the existing spelling (new-user trial 19, F7). The one rule of the quota
    service (set_quota, create_queue: the API, gpuctl, the admin) and the what-if's add_nodes and set_quota changes
    (scheduling/forecast.py; break-it trial 20, F8: `h200` nodes were added next to `H200`). The GPU model of a MIG
    resource "<flavor>/mig-<profile>" is compared. A row `queue` already has for exactly this flavor is not refused
    (it can still be changed, e.g. set to 0)."""
    from .models import Node

    if not isinstance(flavor, str) or not flavor:
        return None
    if queue is not None and queue.pk is not None and Quota.objects.filter(queue=queue, flavor=flavor).exists():
        return None
    model = flavor.partition("/mig-")[0]
    known = set(Node.objects.values_list("flavor", flat=True).distinct()) | {f for f in also if isinstance(f, str)}
    known |= {f.partition("/mig-")[0] for f in Quota.objects.values_list("flavor", flat=True).distinct()}
    if model in known:
        return None
    same = sorted(k for k in known if k.lower() == model.lower())
    if not same:
        return None
    return (f"flavor {model!r} differs from the cluster's {same[0]!r} only in letter case; flavors are "
            f"case-sensitive: use {flavor.replace(model, same[0], 1)!r}")


def case_variant_quotas() -> list[str]:
    """One warning per quota row stored before flavor_case_error's rule whose flavor differs from the cluster's only
    in letter case (`h200` next to the nodes' `H200`), naming the row and how to fix it (break-it trial 20, F13:
    such a row was shown nowhere). The cluster's spelling is the nodes' when a node has one of the spellings, else
    every other spelling of the quotas (none is known right then). A row with guarantee and quota 0 is inert (no job
    can use it, it adds nothing; rows are never deleted: docs/quotas.md) and is not flagged. Shown on the quotas and
    queues pages of the admin."""
    from .models import Node

    nodes = set(Node.objects.values_list("flavor", flat=True).distinct())
    rows = list(Quota.objects.order_by("queue__name", "flavor")
                .values_list("queue__name", "flavor", "guarantee", "quota", "limit"))
    spelled = {f.partition("/mig-")[0] for _, f, *_ in rows} | nodes
    out = []
    for queue, flavor, guarantee, quota, limit in rows:
        model = flavor.partition("/mig-")[0]
        if model in nodes or not (guarantee or quota):
            continue
        others = sorted(k for k in spelled if k != model and k.lower() == model.lower())
        node_spelling = [k for k in others if k in nodes]
        if not others:
            continue
        right = node_spelling[0] if node_spelling else None
        if right is not None:
            what = (f"differs from the nodes' flavor {right!r} only in letter case: flavors are case-sensitive, so "
                    f"no job can use it")
            fix = (f"set {right!r} on queue {queue} (guarantee {guarantee}, quota {quota}, limit "
                   f"{'none' if limit is None else limit}) and this row to guarantee 0, quota 0, limit 0")
        else:
            what = (f"differs from {', '.join(repr(k) for k in others)} of other quotas only in letter case, and no "
                    f"node has either yet: one of them is a typo")
            fix = "set the misspelt row to guarantee 0, quota 0, limit 0 and its numbers on the right spelling"
        out.append(f"quota {flavor!r} of queue {queue} {what}; to fix it, {fix} "
                   f"(quota rows are never deleted: a row with guarantee and quota 0 is inert)")
    return out


def effective_limit(queue_id: int | None, flavor: str) -> int | None:
    """The nearest non-null limit for `flavor` on the path from `queue_id` to the root (None = no cap).
    One query per ancestor; queue trees are shallow."""
    seen: set[int] = set()
    while queue_id is not None and queue_id not in seen:
        seen.add(queue_id)
        limit = Quota.objects.filter(queue_id=queue_id, flavor=flavor).values_list("limit", flat=True).first()
        if limit is not None:
            return limit
        queue_id = Queue.objects.filter(pk=queue_id).values_list("parent_id", flat=True).first()
    return None


def check_against_tree(queue_id: int | None, parent_id: int | None, flavor: str, quota: int,
                       limit: int | None, prefix: str = "", current: int | None = None) -> dict[str, str]:
    """Rules linking one queue's (flavor) quota to its parent and children.

    - the child's limit must not be above the parent's (effective) limit;
    - the children's quotas (siblings + this one) must not sum above the parent's quota, when the parent
      has a quota for this flavor;
    - for an existing queue: its children's quotas must not sum above its new quota, and no child's limit
      may be above its new limit.

    `current`: the queue's quota row for the flavor as it is now, when the change is to that row in place (None: a
    new row, or a queue moving there, checked as new). The rules then refuse only a change that moves a sum the
    wrong way: on a tree that already breaks one (nodes that left under the root queues' quotas, or rows written
    before the queue tree's lock), a cut toward the rule, or a new queue with quota 0, is not refused for the
    others' excess (new-user trial 16, F4).
    """
    errors: dict[str, str] = {}
    if parent_id is not None:
        parent_limit = effective_limit(parent_id, flavor)
        if parent_limit is not None and limit is not None and limit > parent_limit:
            errors[f"{prefix}limit"] = f"limit ({limit}) is above the parent queue's limit ({parent_limit})"
        parent_quota = Quota.objects.filter(queue_id=parent_id, flavor=flavor).values_list("quota", flat=True).first()
        if parent_quota is None and Quota.objects.filter(queue_id=parent_id).exists():
            parent_quota = 0  # a parent with quotas, none for this flavor, deserves none of it to hand down
        if parent_quota is not None:
            siblings = Quota.objects.filter(queue__parent_id=parent_id, flavor=flavor)
            if queue_id is not None:
                siblings = siblings.exclude(queue_id=queue_id)
            total = (siblings.aggregate(s=Sum("quota"))["s"] or 0) + quota
            if total > parent_quota and quota > (current or 0):
                errors[f"{prefix}quota"] = (f"children's quotas would sum to {total}, above the parent queue's "
                                            f"quota ({parent_quota}) for {flavor}")
    else:
        errors.update(check_root_capacity(queue_id, flavor, quota, prefix, current))
    if queue_id is not None:
        children = Quota.objects.filter(queue__parent_id=queue_id, flavor=flavor)
        child_sum = children.aggregate(s=Sum("quota"))["s"] or 0
        if child_sum > quota and (current is None or quota < current):
            errors[f"{prefix}quota"] = f"quota ({quota}) is below the sum of the children's quotas ({child_sum})"
        if limit is not None and children.filter(limit__gt=limit).exists():
            errors[f"{prefix}limit"] = f"limit ({limit}) is below a child queue's limit"
    return errors


def check_root_capacity(queue_id: int | None, flavor: str, quota: int, prefix: str = "",
                        current: int | None = None) -> dict[str, str]:
    """Root queues share the cluster: their quotas for a flavor must not sum above the GPUs of that flavor, or for
    a MIG resource "<flavor>/mig-<profile>" above its instances (checked once nodes are registered; a cluster
    being set up has none yet). `current`: this queue's root quota now; a quota not above it is not refused
    (see check_against_tree)."""
    from .models import Node

    if not Node.objects.exists():
        return {}
    if "/mig-" in flavor:  # a MIG profile's own resource (scheduler/core/sharing.mig_resource): its instances
        from .models import MigInstance

        model, _, profile = flavor.partition("/mig-")
        capacity = MigInstance.objects.filter(gpu__node__flavor=model, profile=profile).count()
    else:
        capacity = Node.objects.filter(flavor=flavor).aggregate(s=Sum("gpu_count"))["s"] or 0
    roots = Quota.objects.filter(queue__parent__isnull=True, flavor=flavor)
    if queue_id is not None:
        roots = roots.exclude(queue_id=queue_id)
    total = (roots.aggregate(s=Sum("quota"))["s"] or 0) + quota
    if total > capacity and quota > (current or 0):
        what = f"the cluster's {capacity} {flavor} GPUs" if capacity else f"the cluster, which has no {flavor} GPUs"
        return {f"{prefix}quota": f"root queues' quotas would sum to {total}, above {what}"}
    return {}


def check_quota(queue: Queue, flavor: str, guarantee, quota, limit, changed: frozenset | set | None = None,
                prefix: str = "") -> dict[str, str]:
    """Every rule one queue's (flavor) guarantee / quota / limit must keep, in the order services.set_quota
    reports them: the flavor (check_flavor), the triple (check_triple), then the tree (check_against_tree).
    The one entry point for the quota service, the Django admin's quota form and the what-if's set_quota
    change (POST /api/v1/forecast/), so a quota the admin cannot save is not forecast either. Keys are
    `prefix` + field name."""
    errors = check_flavor(flavor, queue.pk, f"{prefix}flavor", quota=quota, guarantee=guarantee)
    if not errors:
        errors.update(check_triple(prefix, guarantee, quota, limit, changed))
    if not errors:
        current = (Quota.objects.filter(queue_id=queue.pk, flavor=flavor).values_list("quota", flat=True).first()
                   if queue.pk is not None else None)
        errors.update(check_against_tree(queue.pk, queue.parent_id, flavor, quota, limit, prefix, current))
    return errors


def subtree_ids(queue_id: int) -> set[int]:
    """`queue_id` and every queue below it (trees.Tree over the queues' parents, one query)."""
    return Tree(Queue.objects.values_list("id", "parent_id"), key=itemgetter(0), parent=itemgetter(1)).subtree(queue_id)


def check_parent(queue: Queue, parent: Queue | None, field: str = "parent") -> dict[str, str]:
    """Every quota rule that depends on a queue's parent, for moving existing `queue` (with its quotas and its
    subtree) under `parent` (None = make it a root): per flavor of its quotas, the tree rules of a quota change
    at the new place (check_against_tree: its limit within the parent's limit, the children's quotas within
    the parent's quota, root queues within the cluster), and no limit in its subtree above the new parent's
    (effective) limit. The one re-parent check of services.update_queue (the queue API's PATCH / PUT `parent`,
    the admin's queue form), so a move cannot build a tree a quota change would be refused for (new-user
    trial 11, F2). Reported on `field`, naming the rule; empty when the parent does not change."""
    parent_id = parent.pk if parent is not None else None
    if queue.pk is None or parent_id == queue.parent_id:
        return {}
    where = f"under {parent.name}" if parent is not None else "to the top (a root queue)"
    for flavor, quota, limit in Quota.objects.filter(queue_id=queue.pk).order_by("flavor").values_list(
            "flavor", "quota", "limit"):
        errors = check_against_tree(queue.pk, parent_id, flavor, quota, limit)
        if errors:
            return {field: f"moving {queue.name} {where} breaks a quota rule: {next(iter(errors.values()))}"}
    if parent_id is not None:
        below = (Quota.objects.filter(queue_id__in=subtree_ids(queue.pk), limit__isnull=False)
                 .values_list("flavor", "limit", "queue__name").order_by("flavor", "-limit"))
        for flavor, limit, name in below:
            parent_limit = effective_limit(parent_id, flavor)
            if parent_limit is not None and limit > parent_limit:
                return {field: f"moving {queue.name} {where} breaks a quota rule: queue {name}'s limit ({limit}) "
                               f"is above the parent queue's limit ({parent_limit}) for {flavor}"}
    return {}


def makes_cycle(queue_id: int, new_parent_id: int | None) -> bool:
    """True when making `new_parent_id` the parent of `queue_id` would close a loop in the queue tree."""
    node, seen = new_parent_id, set()
    while node is not None and node not in seen:
        if node == queue_id:
            return True
        seen.add(node)
        node = Queue.objects.filter(pk=node).values_list("parent_id", flat=True).first()
    return node is not None
