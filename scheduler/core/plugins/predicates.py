"""Which GPU flavors (models) a job may use: the one rule the allocator, the fair-share demand and the
submission-time fit check share."""
from __future__ import annotations

from typing import Iterable

from ..snapshot import RoleInfo


def allowed_flavors(roles: Iterable[RoleInfo], flavors: Iterable[str]) -> set[str]:
    """The flavors of `flavors` every GPU role accepts (a role's empty flavor list = any; roles with no
    GPU do not restrict). A job runs on one flavor."""
    allowed = set(flavors)
    for role in roles:
        if role.flavors and role.gpus_per_task:
            allowed &= set(role.flavors)
    return allowed
