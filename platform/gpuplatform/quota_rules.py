"""Validation rules for the queue tree and its quotas (read-only queries; services/queues.py does the writes).

Units: GPUs. Every check returns a dict field -> message (empty when valid) so a service can report all
broken rules of one call at once; services raise `ValidationError` with it.
"""
from __future__ import annotations

from operator import itemgetter

from django.db.models import Sum

from scheduler.core.plugins.quota import claimed
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


class _Claims:
    """What each queue claims of one flavor in its parent's sum, the engine's rule (scheduler/core/plugins/quota.py,
    claimed; docs/quotas.md): its quota row for the flavor; 0 when it has quota rows, none for the
    flavor (it deserves none of it to hand down); a queue with no quota row at all (a grouping node) what its
    children claim, recursively. Built from two queries (queue trees are small), then `change` applies the quota
    change or move being checked: queue `queue_id` (None: a new one) under `parent_id`, with `quota` for the flavor
    (None: its rows as they are, for a move)."""

    NEW = "new queue"

    def __init__(self, flavor: str):
        self.flavor = flavor
        self.parent: dict = dict(Queue.objects.values_list("id", "parent_id"))
        self.has_rows: set = set()
        self.quota: dict = {}
        for qid, f, q in Quota.objects.values_list("queue_id", "flavor", "quota"):
            self.has_rows.add(qid)
            if f == flavor:
                self.quota[qid] = q
        self._kids = None

    def change(self, queue_id: int | None, parent_id: int | None, quota: int | None):
        key = self.NEW if queue_id is None else queue_id
        self.parent[key] = parent_id
        if quota is not None:
            self.has_rows.add(key)
            self.quota[key] = quota
        self._kids = None
        return key

    def kids(self, queue_id) -> list:
        if self._kids is None:
            self._kids = {}
            for q, p in self.parent.items():
                self._kids.setdefault(p, []).append(q)
        return self._kids.get(queue_id, [])

    def claimed(self, queue_id) -> int:
        """The engine's rule, scheduler.core.plugins.quota.claimed, on this tree."""
        return claimed(queue_id, self._quota_of, self.kids)

    def _quota_of(self, queue_id) -> int | None:
        return self.quota.get(queue_id, 0) if queue_id in self.has_rows else None

    def children_claim(self, queue_id) -> int:
        """The sum of `queue_id`'s children's claims (None: the root queues')."""
        return sum(self.claimed(c) for c in self.kids(queue_id))

    def summing_level(self, parent_id) -> tuple[int | None, list]:
        """The level whose sum a child of `parent_id` counts in: the nearest ancestor from `parent_id` up that has a
        quota row (None: the root queues' sum, against the cluster), and the grouping nodes passed on the way."""
        passed, seen = [], set()
        while parent_id is not None and parent_id not in self.has_rows and parent_id not in seen:
            seen.add(parent_id)
            passed.append(parent_id)
            parent_id = self.parent.get(parent_id)
        return parent_id, passed


def _names(ids) -> dict:
    return dict(Queue.objects.filter(pk__in=list(ids)).values_list("id", "name"))


def _passed_words(passed: list, where: str) -> str:
    """'(g has no quota: it claims its children's quotas in root's sum)' for the grouping nodes a sum went through."""
    if not passed:
        return ""
    names = _names(passed)
    listed = ", ".join(names.get(q, str(q)) for q in passed)
    verb = "has no quota: it claims its" if len(passed) == 1 else "have no quota: each claims its"
    return f" ({listed} {verb} children's quotas in {where})"


def _sum_rule(claims: _Claims, parent_id: int | None, flavor: str, new_claim: int, old_claim: int,
              field: str) -> dict[str, str]:
    """The children's-sum rule upward for a claim of `new_claim` (was `old_claim`) under `parent_id`, `claims` holding
    the change: checked at the nearest ancestor with a quota row (through grouping nodes, which claim their
    children's quotas), or among the root queues against the cluster when every ancestor is a grouping node. Only
    a change that raises the sum is refused (check_against_tree)."""
    level, passed = claims.summing_level(parent_id)
    if level is None:  # every ancestor a grouping node (or a root queue itself): the root queues' sum
        return check_root_capacity(None, flavor, new_claim, "", old_claim, claims=claims, field=field, passed=passed)
    bound = claims.quota.get(level, 0)  # a level with quotas, none for this flavor, deserves none to hand down
    total = claims.children_claim(level)
    if total <= bound or new_claim <= old_claim:
        return {}
    name = _names([level]).get(level, str(level))
    # what to do about it (new-user trial 25h, 4: with the children's quotas already summing to the parent's, as the
    # demo's teams do, every increase was refused with no way out named); the API, gpuctl, the admin and the
    # queues page's what-if all show this message
    hint = f": lower another queue's quota first, or raise {name}'s"
    if not passed:
        return {field: f"children's quotas would sum to {total}, above the parent queue's quota ({bound}) for "
                       f"{flavor}{hint}"}
    why = _passed_words(passed, f"{name}'s sum")
    return {field: f"children's quotas would sum to {total} under queue {name}, the nearest ancestor with a quota, "
                   f"above its quota ({bound}) for {flavor}{why}{hint}"}


def check_against_tree(queue_id: int | None, parent_id: int | None, flavor: str, quota: int,
                       limit: int | None, prefix: str = "", current: int | None = None) -> dict[str, str]:
    """Rules linking one queue's (flavor) quota to its parent and children.

    - the child's limit must not be above the parent's (effective) limit;
    - the children's quotas (siblings + this one) must not sum above the parent's quota; a parent with no quota
      row at all (a grouping node) claims its children's quotas in its own parent's sum, so the sum is checked at
      the nearest ancestor with a quota row (a row for another flavor only: quota 0 of this one), or among the
      root queues against the cluster (check_root_capacity) when there is none: at every level, as the engine
      sums them (_Claims; new-user trial 25: a child of a grouping node took any quota);
    - for an existing queue: its children's quotas (a grouping child's children's, recursively) must not sum above
      its new quota, and no child's limit may be above its new limit.

    `current`: the queue's quota row for the flavor as it is now, when the change is to that row in place (None: a
    new row, or a queue moving there, checked as new; a grouping node's first row counts from what its children
    claimed). The rules then refuse only a change that moves a sum the wrong way: on a tree that already breaks
    one (nodes that left under the root queues' quotas, or rows written before the queue tree's lock), a cut
    toward the rule, or a new queue with quota 0, is not refused for the others' excess (new-user trial 16, F4).
    """
    errors: dict[str, str] = {}
    claims = _Claims(flavor)
    old_claim = current or 0
    if current is None and queue_id is not None and queue_id not in claims.has_rows and \
            claims.parent.get(queue_id) == parent_id:
        old_claim = claims.claimed(queue_id)  # a grouping node's first row: it claimed its children's quotas
    key = claims.change(queue_id, parent_id, quota)
    if parent_id is not None:
        parent_limit = effective_limit(parent_id, flavor)
        if parent_limit is not None and limit is not None and limit > parent_limit:
            errors[f"{prefix}limit"] = f"limit ({limit}) is above the parent queue's limit ({parent_limit})"
    errors.update(_sum_rule(claims, parent_id, flavor, quota, old_claim, f"{prefix}quota"))
    if queue_id is not None:
        child_sum = claims.children_claim(key)
        if child_sum > quota and (current is None or quota < current):
            errors[f"{prefix}quota"] = f"quota ({quota}) is below the sum of the children's quotas ({child_sum})"
        if limit is not None and Quota.objects.filter(queue__parent_id=queue_id, flavor=flavor,
                                                      limit__gt=limit).exists():
            errors[f"{prefix}limit"] = f"limit ({limit}) is below a child queue's limit"
    return errors


def check_root_capacity(queue_id: int | None, flavor: str, quota: int, prefix: str = "",
                        current: int | None = None, *, claims: _Claims | None = None, field: str | None = None,
                        passed: list = ()) -> dict[str, str]:
    """Root queues share the cluster: their quotas for a flavor must not sum above the GPUs of that flavor, or for
    a MIG resource "<flavor>/mig-<profile>" above its instances (checked once nodes are registered; a cluster
    being set up has none yet). A root queue with no quota row (a grouping node) counts what its children claim
    (_Claims). `current`: this queue's claim now; a claim not above it is not refused (see check_against_tree).
    `claims`: the tree with the change applied (None: root queue `queue_id` given `quota`); `passed`: the grouping
    nodes a child's claim went up through, named in the message."""
    from .models import Node

    if not Node.objects.exists():
        return {}
    if "/mig-" in flavor:  # a MIG profile's own resource (scheduler/core/sharing.mig_resource): its instances
        from .models import MigInstance

        model, _, profile = flavor.partition("/mig-")
        capacity = MigInstance.objects.filter(gpu__node__flavor=model, profile=profile).count()
        more = f"add {profile} MIG instances on {model} GPUs"
    else:
        capacity = Node.objects.filter(flavor=flavor).aggregate(s=Sum("gpu_count"))["s"] or 0
        more = f"add nodes of {flavor}"
    if claims is None:
        claims = _Claims(flavor)
        claims.change(queue_id, None, quota)
    total = claims.children_claim(None)
    if total > capacity and quota > (current or 0):
        what = f"the cluster's {capacity} {flavor} GPUs" if capacity else f"the cluster, which has no {flavor} GPUs"
        why = _passed_words(list(passed), "the root queues' sum")
        # what lets it pass, as _sum_rule's hint says at a parent (new-user trial 25h, 4): less claimed by the other
        # queues in the sum, unless this claim alone is above the capacity, or more capacity
        hint = (f": lower another queue's quota first, or {more}" if quota <= capacity else
                f": {more} first (this quota alone, {quota}, is more than the cluster has)")
        return {field or f"{prefix}quota": f"root queues' quotas would sum to {total}, above {what}{why}{hint}"}
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
    the parent's quota, root queues within the cluster; a queue with no quota row brings what its children claim,
    as the engine sums it: _Claims), and no limit in its subtree above the new parent's
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
    if not Quota.objects.filter(queue_id=queue.pk).exists():  # a grouping node brings what its children claim
        flavors = (Quota.objects.filter(queue_id__in=subtree_ids(queue.pk)).order_by("flavor")
                   .values_list("flavor", flat=True).distinct())
        for flavor in flavors:
            claims = _Claims(flavor)
            claims.change(queue.pk, parent_id, None)
            claim = claims.claimed(queue.pk)
            errors = _sum_rule(claims, parent_id, flavor, claim, 0, field) if claim else {}
            if errors:
                return {field: f"moving {queue.name} {where} breaks a quota rule: {errors[field]} ({queue.name} has "
                               f"no quota: it claims its children's {claim})"}
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
