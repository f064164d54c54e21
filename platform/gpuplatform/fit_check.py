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
    why = _never_fits(roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa,
                      extra_nodes=extra_nodes)
    return why[:2] if why is not None else None


def _never_fits(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
                numa: str = "prefer", extra_nodes: tuple = ()) -> tuple[str, str, str | None, str | None] | None:
    """never_fits_reason as (code, message, role, field): `role` the name of the role at fault when the reason is
    about one role's own ask (the engine's PendingReason.role), else None; `field` the role's field at fault
    when the GPU-share rule (_never_fits_shares) says it, else None (refusal_errors maps the code)."""
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
    return (reason.code, reason.message, reason.role, None) if reason is not None else None


def refusal(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
            numa: str = "prefer") -> str | None:
    """Submission's refusal of a job that can never fit this cluster ("can never fit this cluster: ..."), or
    None (the message refusal_errors files under the field at fault: POST /api/v1/jobs/, the shape check)."""
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


# an engine never-fit code -> the field of the role at fault (job submission's names, "roles[i].<field>"): the one
# to change (the GPU-share rule, _never_fits_shares, names its own)
ROLE_FIELDS = {"never_fits_flavor": "flavor", "never_fits_node": "gpus_per_task", "never_fits_numa": "gpus_per_task",
               "never_fits_cpu": "cpu_milli", "never_fits_memory": "memory_mib", "never_fits_group": "group_size"}


def refusal_errors(roles: list[dict], *, topology_mode: str = "none", highest_tier: int | None = None,
                   numa: str = "prefer", subgroups=None, given: list | None = None,
                   extra_nodes: tuple = ()) -> dict[str, str] | None:
    """refusal as ValidationError entries keyed by the field at fault, in the API's one error shape (docs/api.md,
    "Errors: one shape"), or None when the job may fit. `roles`: the normalised roles (check_job), in the
    request's order; `given`: the roles as the request gave them (a share asked as `gpus_per_task` 0.5 is
    named so, not `gpu_fraction`); `extra_nodes`: a what-if's added nodes, as refusal_reason takes them (the
    what-if's submit changes with roles: scheduling.forecast.submit_roles). Only the mapping is here; the rule is
    the engine's (the reason's code and role):
    - a role's own ask: `roles[i].gpus_per_task` (a task bigger than every node, or its NUMA nodes),
      `roles[i].cpu_milli`, `roles[i].memory_mib`, `roles[i].flavor` (no node of it), `roles[i].mig_profile`
      (no node has it) or `roles[i].mig_count` (none has that many), `roles[i].gpu_fraction` /
      `roles[i].gpu_memory_mib` (no GPU takes that share), `roles[i].group_size` (a
      group too big for its tier: `subgroups[k].group_size` when the job's `subgroups` gave it);
    - a role's minimum that can never be packed at once (CPU, memory, GPUs in a domain, shares): `roles[i].tasks`,
      or `roles[i].min_available` when the role's minimum is fewer than its tasks;
    - no domain of the job's tier: `highest_tier`;
    - the job's roles together (their minimums' sum): `roles`, or the only role's tasks / min_available.
    (Every refusal was keyed `roles` before, whatever field it was about: a client could not tell which to change.)"""
    why = _never_fits(roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa,
                      extra_nodes=extra_nodes)
    if why is None:
        return None
    code, message, role_name, field = why
    message = message if message.startswith("can never fit") else f"can never fit this cluster: {message}"
    if code == "never_fits_tier":
        return {"highest_tier": message}
    index = next((i for i, r in enumerate(roles) if r["name"] == role_name), None)
    if index is None and len(roles) == 1:
        index = 0  # the job's total is its only role's
    if index is None:
        return {"roles": message}
    role = roles[index]
    field = field or ROLE_FIELDS.get(code)
    raw = given[index] if given and index < len(given) and isinstance(given[index], dict) else {}
    if field == "gpu_fraction" and raw and raw.get("gpu_fraction") is None:
        field = "gpus_per_task"  # the share was asked as a fraction of gpus_per_task
    if code == "never_fits_group":
        for k, sub in enumerate(subgroups or ()):
            if isinstance(sub, dict) and "group_size" in sub and sub.get(
                    "role", "worker" if len(roles) == 1 else None) == role["name"]:
                return {f"subgroups[{k}].group_size": message}
    elif field is None:  # its minimum, all at once
        field = "min_available" if role["min_available"] < role["tasks"] else "tasks"
    return {f"roles[{index}].{field}": message}


def _never_fits_shares(roles: list[dict], extra_nodes: tuple = ()) -> tuple[str, str, str, str] | None:
    """A job of GPU shares (scheduler/core/sharing.py) never fits when a task asks more milli-CPU or memory
    than every node of its flavors has (0 = unconstrained), no GPU of an allowed flavor takes
    fractions (mode shared or auto; with the memory asked for) or no node has mig_count instances of the profile.
    An empty cluster refuses nothing. `extra_nodes` (a what-if's added nodes) have exclusive GPUs: they count for
    CPU and memory only. Returns (code, message, the role's name, its field at fault) or None."""
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
                        f"{max(h[index] for h in mine)})", r["name"], key)
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
                        f"profile {r['mig_profile']}" + (f" on {'|'.join(flavors)}" if flavors else ""), r["name"],
                        "mig_count" if per_node else "mig_profile")  # too few instances, or none of it
            continue
        shareable = gpus.filter(sharing__in=("shared", "auto"))
        if r.get("gpu_memory_mib"):
            shareable = shareable.filter(memory_mib__gte=r["gpu_memory_mib"])
        if not shareable.exists():
            what = f"{r['gpu_memory_mib']} MiB of memory" if r.get("gpu_memory_mib") else "fractions"
            return ("never_fits_shared", f"role {r['name']}: no GPU in mode shared or auto takes {what}" + (
                f" on {'|'.join(flavors)}" if flavors else ""), r["name"],
                "gpu_memory_mib" if r.get("gpu_memory_mib") else "gpu_fraction")
        why = _too_many_shares(r, flavors, list(shareable.values_list("memory_mib", flat=True)))
        if why is not None:
            return "never_fits_shares", why, r["name"], "min_available" if r["min_available"] < r["tasks"] else "tasks"
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
