"""Which GPU flavors (models) a job may use: the one rule the allocator, the fair-share demand and the
submission-time fit check share."""
from __future__ import annotations

from typing import Iterable

from ..snapshot import RoleInfo


def allowed_flavors(roles: Iterable[RoleInfo], flavors: Iterable[str]) -> set[str]:
    """The flavors of `flavors` every GPU role accepts (a role's empty flavor list = any; roles with no
    GPU do not restrict): the flavors the whole job may run on. Empty for a heterogeneous job, whose
    roles run on different flavors (flavor_plans)."""
    allowed = set(flavors)
    for role in roles:
        if role.flavors and role.gpus_per_task:
            allowed &= set(role.flavors)
    return allowed


def role_flavors(role: RoleInfo, flavors: Iterable[str]) -> set[str]:
    """The flavors of `flavors` one role accepts (all of them when it names none)."""
    return set(flavors) if not role.flavors else set(role.flavors) & set(flavors)


def flavor_plans(roles: Iterable[RoleInfo], flavors: Iterable[str], *, rank=sorted, limit: int = 8
                 ) -> list[dict[str, str]]:
    """For a heterogeneous job (its GPU roles share no flavor): the role name -> flavor assignments to
    try, at most `limit`, each role's flavors in `rank` order (a function of a set, returning a list).
    [] when some GPU role accepts no flavor of `flavors`."""
    plans: list[dict[str, str]] = [{}]
    for role in roles:
        if not role.gpus_per_task:
            continue
        mine = rank(role_flavors(role, flavors))
        if not mine:
            return []
        plans = [{**p, role.name: f} for p in plans for f in mine][:limit]
    return plans
