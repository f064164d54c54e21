"""Submission-time "can this job EVER fit this cluster?" (read only), asking the engine's own rule.

The engine marks such jobs terminal at cycle time (its static feasibility rule); the API refuses them up
front with a 400 instead, so a script learns at once. Nothing is re-implemented here: the cluster's shape
(every node, any state, with its flavor, GPU count, milli-CPU, memory and domain, and the domain tree) is
read in two flat queries and `scheduler.core.never_fits` is asked, which applies the allocator's flavor rule, tier cap and
`Capacity.never_fits`. The job is refused only when every allowed flavor never fits.

An empty cluster (no nodes registered yet) refuses nothing: it is being set up, not too small; neither
does a broken domain tree (the cycle's problem to report).
"""
from __future__ import annotations

from scheduler.core import DomainInfo, NodeInfo, RoleInfo, TopologyError
from scheduler.core import never_fits as engine_never_fits
from scheduler.core.sharing import FULL, task_memory, task_milli

from .models import Domain, Gpu, MigInstance, Node


def never_fits(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
               numa: str = "prefer", extra_nodes: tuple = ()) -> str | None:
    """Why the job can never fit this cluster (the engine's message), or None when it may fit.
    `roles` are normalised role dicts (job_rules.check_roles): tasks, gpus_per_task, min_available, flavor,
    group_size, group_highest_tier, group_mode. numa "single" also reads the GPUs' NUMA nodes. Roles of GPU
    shares are checked by `_never_fits_shares`, the others (a mixed job's whole-GPU roles) by the engine.
    `extra_nodes`: NodeInfo of nodes a what-if adds (whole GPUs, mode exclusive), counted with the cluster's."""
    why = never_fits_reason(roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa,
                            extra_nodes=extra_nodes)
    return why[1] if why is not None else None


def never_fits_reason(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
                      numa: str = "prefer", extra_nodes: tuple = ()) -> tuple[str, str] | None:
    """never_fits as (code, message): the engine's PendingReason code (never_fits_flavor, never_fits_node,
    never_fits_cpu, never_fits_memory, never_fits_tier, never_fits_domain, ...) or, for GPU shares,
    never_fits_cpu, never_fits_memory, never_fits_mig, never_fits_shared or never_fits_shares; None when the job
    may fit. The code lets a caller name the field at fault (the what-if's `changes[i].flavors`)."""
    sharing = [r for r in roles if r.get("gpu_milli") or r.get("gpu_memory_mib") or r.get("mig_profile")]
    if sharing:
        why = _never_fits_shares(sharing, extra_nodes)
        roles = [r for r in roles if r not in sharing]  # a mixed job: its whole-GPU roles are checked below
        if why is not None or not roles:
            return why
    layout: dict[int, dict[int, int]] = {}
    if numa == "single":
        for node_id, index, zone in Gpu.objects.values_list("node_id", "index", "numa_node"):
            layout.setdefault(node_id, {})[index] = zone if zone is not None else 0
    nodes = tuple(NodeInfo(name=name, flavor=flavor, gpus=gpus, domain=domain, cpu_milli=cpu, memory_mib=mem,
                           gpu_numa=tuple(layout[nid].get(i, 0) for i in range(gpus)) if nid in layout else ())
                  for nid, name, flavor, gpus, domain, cpu, mem in Node.objects.values_list(
                      "id", "name", "flavor", "gpu_count", "domain__name", "cpu_milli", "memory_mib"))
    if not nodes:
        return None
    nodes += tuple(extra_nodes)
    domains = tuple(DomainInfo(n, t, p) for n, t, p in Domain.objects.values_list("name", "tier", "parent__name"))
    infos = tuple(RoleInfo(r["name"], r["tasks"], r["gpus_per_task"], r["min_available"], r.get("cpu_milli", 0),
                           r.get("memory_mib", 0), tuple(f for f in (r.get("flavor") or "").split("|") if f),
                           group_size=r.get("group_size") or 0, group_highest_tier=r.get("group_highest_tier"),
                           group_mode=r.get("group_mode") or "hard")
                  for r in roles)
    try:
        reason = engine_never_fits(nodes, domains, infos, topology_mode=topology_mode, highest_tier=highest_tier,
                                   numa=numa)
    except TopologyError:
        return None  # a broken tree is the cycle's problem to report, not a reason to refuse a job
    return (reason.code, reason.message) if reason is not None else None


def refusal(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
            numa: str = "prefer") -> str | None:
    """Submission's refusal of a job that can never fit this cluster ("can never fit this cluster: ..."), or
    None: what POST /api/v1/jobs/ (services.submit_job) and the reschedule API answer under "roles"."""
    why = refusal_reason(roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa)
    return why[1] if why is not None else None


def refusal_reason(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
                   numa: str = "prefer", extra_nodes: tuple = ()) -> tuple[str, str] | None:
    """refusal as (code, message) (never_fits_reason's code), on the cluster plus `extra_nodes`: a what-if
    `submit` change (scheduling.forecast.submit_roles) is checked against the cluster its add_nodes changes
    build (new-user trial 14, F4: "would it fit if we added these nodes?" was refused as never fitting)."""
    why = never_fits_reason(roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa,
                            extra_nodes=extra_nodes)
    if not why:
        return None
    code, message = why
    return code, message if message.startswith("can never fit") else f"can never fit this cluster: {message}"


def _never_fits_shares(roles: list[dict], extra_nodes: tuple = ()) -> tuple[str, str] | None:
    """A job of GPU shares (scheduler/core/sharing.py) never fits when a task asks more milli-CPU or memory
    than every node of its flavors has (0 = unconstrained), no GPU of an allowed flavor takes
    fractions (mode shared or auto; with the memory asked for) or no node has mig_count instances of the profile.
    An empty cluster refuses nothing. `extra_nodes` (a what-if's added nodes) have exclusive GPUs: they count for
    CPU and memory only. Returns (code, message) or None."""
    if not Node.objects.exists():
        return None
    hosts = list(Node.objects.values_list("flavor", "cpu_milli", "memory_mib"))
    hosts += [(n.flavor, n.cpu_milli, n.memory_mib) for n in extra_nodes]
    for r in roles:
        flavors = [f for f in (r.get("flavor") or "").split("|") if f]
        mine = [h for h in hosts if not flavors or h[0] in flavors]
        for index, key, unit in ((1, "cpu_milli", "milli-CPU"), (2, "memory_mib", "MiB of memory")):
            want = r.get(key) or 0
            if want and mine and all(h[index] for h in mine) and want > max(h[index] for h in mine):
                where = "|".join(flavors) + " " if flavors else ""
                return (f"never_fits_{key.split('_')[0]}",
                        f"role {r['name']}: {want} {unit} per task exceeds every {where}node (largest has "
                        f"{max(h[index] for h in mine)})")
        gpus = Gpu.objects.all()
        if flavors:
            gpus = gpus.filter(node__flavor__in=flavors)
        if r.get("mig_profile"):
            per_node: dict[int, int] = {}
            for node_id in (MigInstance.objects.filter(gpu__in=gpus.filter(sharing="mig"), profile=r["mig_profile"])
                            .values_list("gpu__node_id", flat=True)):
                per_node[node_id] = per_node.get(node_id, 0) + 1
            if max(per_node.values(), default=0) < r["gpus_per_task"]:
                return ("never_fits_mig", f"role {r['name']}: no node has {r['gpus_per_task']} MIG instance(s) of "
                        f"profile {r['mig_profile']}" + (f" on {'|'.join(flavors)}" if flavors else ""))
            continue
        shareable = gpus.filter(sharing__in=("shared", "auto"))
        if r.get("gpu_memory_mib"):
            shareable = shareable.filter(memory_mib__gte=r["gpu_memory_mib"])
        if not shareable.exists():
            what = f"{r['gpu_memory_mib']} MiB of memory" if r.get("gpu_memory_mib") else "fractions"
            return ("never_fits_shared", f"role {r['name']}: no GPU in mode shared or auto takes {what}" + (
                f" on {'|'.join(flavors)}" if flavors else ""))
        why = _too_many_shares(r, flavors, list(shareable.values_list("memory_mib", flat=True)))
        if why is not None:
            return "never_fits_shares", why
    return None


def _too_many_shares(role: dict, flavors: list[str], memories: list[int]) -> str | None:
    """Why the role's minimum gang of fractions (min_available tasks) can never be held at once by the GPUs in
    mode shared or auto of its flavors (`memories`: each such GPU's memory in MiB, 0 = unknown), or None.
    A GPU holds FULL // milli shares of `milli` thousandths, and no more than its memory allows (a share of
    gpu_memory_mib is also ceil(memory / GPU memory) thousandths of its compute). Health and current use are
    left out: they change, this does not."""
    need = min(role["min_available"], role["tasks"])
    probe = RoleInfo(role["name"], role["tasks"], role["gpus_per_task"], need,
                     gpu_milli=role.get("gpu_milli") or 0, gpu_memory_mib=role.get("gpu_memory_mib") or 0)
    holds = 0
    for memory in memories:
        milli = task_milli(probe, memory)
        if not milli:
            continue  # a memory request on a GPU of unknown memory: the engine cannot place it there
        size = task_memory(probe, memory)
        holds += min(FULL // milli, memory // size) if memory and size else FULL // milli
    if need <= holds:
        return None
    ask = f"{probe.gpu_milli / FULL:g} GPU" if probe.gpu_milli else f"{probe.gpu_memory_mib} MiB"
    where = f" of {'|'.join(flavors)}" if flavors else ""
    return (f"role {role['name']}: needs {need} GPU shares of {ask} at once, exceeds the {len(memories)} "
            f"GPU(s) in mode shared or auto{where} (they hold at most {holds})")
