"""The static feasibility rule says which role is at fault (PendingReason.role, its name), so a caller can name the
field to change (the platform's fit_check.refusal_errors keys a submission's refusal `roles[i].<field>`); a reason
about the roles together names none. The code and message are unchanged."""
from __future__ import annotations

import pytest

from scheduler.core import DomainInfo, NodeInfo, never_fits
from scheduler.core.testing import role

NODES = [NodeInfo(name=f"n{i}", flavor="H200", gpus=8, domain="d", cpu_milli=2000, memory_mib=4000) for i in range(2)]
DOMAINS = [DomainInfo("d", 1, None)]


@pytest.mark.parametrize("roles, code, at_fault", [
    ([role(name="ps", gpus_per_task=1), role(name="w", gpus_per_task=9)], "never_fits_node", "w"),
    ([role(name="ps", gpus_per_task=0, cpu_milli=2001), role(name="w")], "never_fits_cpu", "ps"),
    ([role(name="w", memory_mib=4001)], "never_fits_memory", "w"),
    ([role(name="w", tasks=5, gpus_per_task=0, cpu_milli=1000, memory_mib=1)], "never_fits_cpu_gang", "w"),
    ([role(name="w", tasks=3, gpus_per_task=1, memory_mib=3000)], "never_fits_memory_gang", "w"),
    ([role(name="ps"), role(name="w", flavors=["B200"])], "never_fits_flavor", "w"),
    ([role(name="w", tasks=3, gpus_per_task=8, group_size=3, group_highest_tier=1)], "never_fits_group", "w"),
    ([role(name="w", tasks=3, gpus_per_task=5)], "never_fits_domain", "w"),  # one task per node: 2 nodes
    ([role(name="a", tasks=2, gpus_per_task=5), role(name="b", tasks=2, gpus_per_task=4)], "never_fits_domain",
     None),  # 18 GPUs of 16: the roles together
])
def test_the_reason_names_the_role_at_fault(roles, code, at_fault):
    reason = never_fits(NODES, DOMAINS, roles)
    assert reason is not None and reason.terminal and reason.code == code, reason
    assert reason.role == at_fault, reason
