"""Nodes and their GPUs (models/cluster.py): registration and heartbeats from the node agents, and the
admins' cordon / drain / uncordon. State changes are node_states.py's. Heartbeats arrive every few
seconds, so an Event is written only when something changed (a GPU's health, a not_ready node back).
Units: GPUs, millicores, MiB, seconds."""
from __future__ import annotations

import string
from collections import Counter
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models.functions import Lower

from .. import clock
from ..audit import record_event, record_events
from ..diagnosis.health import audit_topology, judge_gpu_signals, record_validation, validation_check
from ..errors import ValidationError
from ..lifecycle import evict_jobs_on_nodes
from ..models import Allocation, Event, Gpu, MigInstance, Node
from ..names import name_error
from ..scheduling.locks import lock_name
from ..wording import one_of
from . import node_states
from .base import request_cycle_on_commit

__all__ = ["register_node", "record_heartbeat", "cordon_node", "drain_node", "uncordon_node", "set_spare",
           "set_gpu_sharing", "set_node_gpu_sharing", "set_gpu_fence", "uuid_key", "refuse_while_gpus_held"]
MIG_FIELDS = ("uuid", "profile", "memory_mib", "slices")


# The highest GPU index a node may report: NVML numbers a node's GPUs 0..count-1 (16 on the largest boards), and the
# engine sees a node's GPUs as 0..its highest index, an index with no GPU row counting as an unhealthy GPU
# (scheduling/store.py): index 32767 on a 4-GPU node showed "H100 x32768" and gave the engine 32,768 GPUs to walk
# (trial 18, finding 4).
MAX_GPU_INDEX = 63

# a MIG instance's fields as MigInstance stores them (models/cluster.py)
MIG_UUID_MAX, MIG_PROFILE_MAX = 80, 32
MIG_COUNT_MAX = {"memory_mib": 2**31 - 1, "slices": 2**15 - 1}

_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
ONE_DEVICE = "a UUID names one device: one GPU or one MIG instance"


def uuid_key(uuid: str) -> str:
    """The one comparison of GPU and MIG instance UUIDs (registration, its UUID locks, the held-elsewhere check,
    heartbeat entries, MIG layouts): two UUIDs name one device when their keys are equal, letter case ignored (NVML
    writes "GPU-5a3c..." / "MIG-..."; a lower-case copy of a live GPU's UUID registered on another node was a new GPU:
    two rows for one physical GPU). ASCII letters only, as SQL lower() folds them on every database; what is stored is
    what the agent sent. Raises nothing."""
    return uuid.translate(_FOLD)


def _uuid_in(queryset, uuids, field: str = "uuid"):
    """`queryset` narrowed to the rows whose `field` may be one of `uuids` as uuid_key compares them (SQL lower();
    the caller keeps a row only when uuid_key of its UUID is one it looks for: uuid_key decides)."""
    keys = sorted({uuid_key(u) for u in uuids})
    return queryset.alias(uuid_lower=Lower(field)).filter(uuid_lower__in=keys)


def _same_words(sent: str, stored: str) -> str:
    """`sent`, and `stored` when it differs from it in letter case only."""
    return sent if sent == stored else f"{sent} ({stored}, letter case aside)"


def _check_gpus(gpus: list[dict]) -> dict[str, str]:
    errors = {}
    seen = set()
    uuids: dict[str, tuple[int, str]] = {}  # uuid_key -> (i, the UUID as gpus[i] gives it)
    mig_uuids: dict[str, tuple[str, str]] = {}  # MIG instance uuid_key -> (where this request gives it first, as given)
    for i, g in enumerate(gpus):
        idx = g.get("index")
        if not isinstance(idx, int) or idx < 0 or idx in seen or idx > MAX_GPU_INDEX:
            errors[f"gpus[{i}].index"] = f"index must be a distinct integer from 0 to {MAX_GPU_INDEX}"
        seen.add(idx)
        uuid = g.get("uuid")
        if uuid is not None and not isinstance(uuid, str):
            errors[f"gpus[{i}].uuid"] = "uuid must be a string (the GPU's NVML UUID)"
        elif uuid and uuid_key(uuid) in uuids:  # one physical GPU listed twice (new-user trial 15, F4)
            j, theirs = uuids[uuid_key(uuid)]
            errors[f"gpus[{i}].uuid"] = (f"uuid {_same_words(uuid, theirs)} is given twice (gpus[{j}] has it): a GPU's "
                                         f"UUID is unique, letter case ignored")
        elif uuid:
            uuids[uuid_key(uuid)] = (i, uuid)
        if g.get("health", "healthy") not in Gpu.Health.values:
            errors[f"gpus[{i}].health"] = f"health must be one of {one_of(Gpu.Health.values)}"
        memory = g.get("memory_mib")
        if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool) or memory < 0):
            errors[f"gpus[{i}].memory_mib"] = "memory_mib must be a whole number of MiB >= 0"
        mig = g.get("mig")
        if mig is not None:
            if not isinstance(mig, list):
                errors[f"gpus[{i}].mig"] = "mig must be a list of {uuid, profile, memory_mib, slices}"
                continue
            for k, inst in enumerate(mig):
                if not isinstance(inst, dict) or not isinstance(inst.get("uuid"), str) or not inst["uuid"] \
                        or not isinstance(inst.get("profile"), str) or not inst["profile"]:
                    errors[f"gpus[{i}].mig[{k}]"] = "a MIG instance needs a uuid and a profile name"
                elif len(inst["uuid"]) > MIG_UUID_MAX:  # (the columns' bounds: beyond them the write was a 500)
                    errors[f"gpus[{i}].mig[{k}].uuid"] = f"a MIG instance's uuid has at most {MIG_UUID_MAX} characters"
                elif len(inst["profile"]) > MIG_PROFILE_MAX:
                    errors[f"gpus[{i}].mig[{k}].profile"] = (f"a MIG profile name (e.g. 3g.71gb) has at most "
                                                             f"{MIG_PROFILE_MAX} characters")
                elif any(not isinstance(inst.get(f) or 0, int) or isinstance(inst.get(f), bool)
                         or not 0 <= (inst.get(f) or 0) <= top for f, top in MIG_COUNT_MAX.items()):
                    errors[f"gpus[{i}].mig[{k}]"] = (f"memory_mib and slices must be whole numbers from 0 to "
                                                     f"{MIG_COUNT_MAX['memory_mib']} and {MIG_COUNT_MAX['slices']}")
                elif uuid_key(inst["uuid"]) in mig_uuids:  # one instance on two GPUs (trial 17c, G2: kept on the last)
                    where, theirs = mig_uuids[uuid_key(inst["uuid"])]
                    errors[f"gpus[{i}].mig[{k}].uuid"] = (f"uuid {_same_words(inst['uuid'], theirs)} is given twice "
                                                          f"({where} has it): a MIG instance's UUID is unique, letter "
                                                          f"case ignored")
                else:
                    mig_uuids[uuid_key(inst["uuid"])] = (f"gpus[{i}].mig[{k}]", inst["uuid"])
    # a MIG instance's UUID is not a GPU's (its own GPU's or another's): a task given it would get the whole GPU
    for key, (where, given) in mig_uuids.items():
        if key in uuids and f"{where}.uuid" not in errors:
            j, theirs = uuids[key]
            errors[f"{where}.uuid"] = (f"uuid {_same_words(given, theirs)} is the UUID of GPU gpus[{j}] (index "
                                       f"{gpus[j].get('index')}) in this registration: {ONE_DEVICE}, letter case "
                                       f"ignored")
    return errors


MIG_GONE_REASON = "MIG instance(s) in use not in the node's reported MIG layout (re-partitioned or MIG turned off " \
                  "under a running job)"


MIG_ON_REASON = "MIG turned on under a running whole-GPU or shared job"


def _sync_mig(gpu: Gpu, g: dict) -> None:
    """A GPU's MIG layout as its agent reported it (NVML): `mig_mode` "enabled" with instances -> mode mig and exactly
    those MigInstance rows; `mig_mode` "disabled" on a GPU in mode mig -> back to exclusive, instances dropped.
    An instance only released allocations name is dropped (they keep their GPU and times; trial 17, F2: a node
    re-partitioned after MIG jobs had run there could never register again: 409 "still referenced"). One a live
    allocation holds that the report no longer lists is kept, and the GPU is held unhealthy (MIG_GONE_REASON;
    Gpu.out_of_service "mig_changed"):
    nothing is placed on it, its slices are not counted twice beside the new layout, the job on it is requeued by
    failure detection, and the GPU stays in mode mig until then (trial 17c, G3 and G10: a whole-GPU job was bound
    beside the running MIG job, and new instances were filled beside the one still in use). A later registration
    with no such instance makes it healthy (the report's health) and drops the old instance."""
    if g.get("mig_mode") not in ("enabled", "disabled", True, False):
        return  # not reported (no NVML MIG support, or a client that does not read it): keep what is stored
    enabled = g.get("mig_mode") in (True, "enabled")
    if not enabled and gpu.sharing != Gpu.Sharing.MIG:
        return
    reported = {uuid_key(inst["uuid"]) for inst in g.get("mig") or ()} if enabled else set()
    if enabled and g.get("mig") is None:
        return
    live = set(Allocation.objects.filter(mig_instance__gpu=gpu, released_at__isnull=True)
               .values_list("mig_instance__uuid", flat=True))
    gone_live = sorted(u for u in live if uuid_key(u) not in reported)
    keep = reported | {uuid_key(u) for u in live}
    MigInstance.objects.filter(pk__in=[pk for pk, uuid in MigInstance.objects.filter(gpu=gpu).values_list("pk", "uuid")
                                       if uuid_key(uuid) not in keep]).delete()
    for inst in g.get("mig") or () if enabled else ():
        # the instance of that UUID (uuid_key), wherever it was: it takes the spelling the agent sent
        fields = {"uuid": inst["uuid"], "gpu": gpu, "profile": inst["profile"],
                  "memory_mib": inst.get("memory_mib") or 0, "slices": inst.get("slices") or 0}
        same = sorted((uuid != inst["uuid"], pk) for pk, uuid in _uuid_in(MigInstance.objects, [inst["uuid"]])
                      .values_list("pk", "uuid") if uuid_key(uuid) == uuid_key(inst["uuid"]))  # (its spelling first)
        row = same[0][1] if same else None
        if row is None:
            MigInstance.objects.create(**fields)
        else:
            MigInstance.objects.filter(pk=row).update(**fields)
    mode = Gpu.Sharing.MIG if enabled or gone_live else Gpu.Sharing.EXCLUSIVE
    fields = {"sharing": mode}
    if gone_live:
        fields.update(health=Gpu.Health.UNHEALTHY, health_reason=f"{MIG_GONE_REASON}: {', '.join(gone_live)}"[:200],
                      out_of_service=Gpu.OutOfService.MIG_CHANGED)
    elif enabled and gpu.sharing != Gpu.Sharing.MIG and Allocation.objects.filter(
            gpu=gpu, released_at__isnull=True, mig_instance__isnull=True).exists():
        # MIG turned on under a whole-GPU or shared job (the sharing API refuses that change for a GPU in use):
        # out of service until that job is gone (trial 17c, G12: MIG jobs were bound beside it)
        fields.update(health=Gpu.Health.UNHEALTHY, health_reason=MIG_ON_REASON,
                      out_of_service=Gpu.OutOfService.MIG_CHANGED)
    Gpu.objects.filter(pk=gpu.pk).update(**fields)


@transaction.atomic
def set_gpu_sharing(node: Node, index: int, sharing: str, *, actor=None) -> Gpu:
    """Set GPU `index` of `node` to sharing mode exclusive, shared or auto (mode mig comes from the node agent's
    NVML report, never from here). Refused while a task holds the GPU (its work was placed under the old mode).
    Setting the mode the GPU already has changes nothing (no Event). Raises ValidationError: "sharing" (unknown mode, or mig), "index" (no such GPU, or the GPU is in use)."""
    if sharing not in (Gpu.Sharing.EXCLUSIVE, Gpu.Sharing.SHARED, Gpu.Sharing.AUTO):
        raise ValidationError({"sharing": "sharing must be exclusive, shared or auto (mig is set by the node "
                                          "agent from the GPU's MIG mode)"})
    gpu = Gpu.objects.select_for_update().filter(node=node, index=index).first()
    if gpu is None:
        raise ValidationError({"index": f"node {node.name} has no GPU {index}"})
    if gpu.sharing == Gpu.Sharing.MIG:
        raise ValidationError({"sharing": f"{gpu} is in MIG mode: disable MIG on the node first"})
    if gpu.sharing == sharing:
        return gpu  # already in that mode: nothing changes, so no Event and no cycle (even while in use)
    if Allocation.objects.filter(gpu=gpu, released_at__isnull=True).exists():
        raise ValidationError({"index": f"{gpu} is in use: change its sharing mode when it is idle"})
    old = gpu.sharing
    Gpu.objects.filter(pk=gpu.pk).update(sharing=sharing)
    record_event("gpu_sharing", f"{gpu}: sharing {old} -> {sharing}", actor=actor, node=node,
                 data={"index": index, "from": old, "to": sharing})
    request_cycle_on_commit()
    gpu.refresh_from_db()
    return gpu


@transaction.atomic
def set_gpu_fence(node: Node, index: int, fenced: bool, *, reason: str = "", actor=None) -> Gpu:
    """An admin's fence of GPU `index` of `node` (fenced=True) or its end (False): one GPU out of service without
    cordoning its node (a flapping ECC, a fan). A fenced GPU is not offered to new jobs (the scheduler's snapshot
    counts it unhealthy) and the API shows it unhealthy with `reason`, whatever its agent's heartbeats report: they
    keep updating the stored health (the agent's view), which is what an unfence returns to. As a cordon, a job
    running on it keeps it (failure detection reads the agent's health, not the fence). Audited: a `gpu_fenced` /
    `gpu_unfenced` Event; fencing a fenced GPU again only updates its reason, unfencing an unfenced one changes
    nothing (no Event). Raises ValidationError: "reason" (fencing without one), "index" (no such GPU)."""
    reason = (reason or "").strip()[:200]
    if fenced and not reason:
        raise ValidationError({"reason": "say why the GPU is fenced (it is shown as its health reason)"})
    gpu = Gpu.objects.select_for_update().filter(node=node, index=index).first()
    if gpu is None:
        raise ValidationError({"index": f"node {node.name} has no GPU {index}"})
    if not fenced and not gpu.fenced:
        return gpu
    if fenced and gpu.fenced and gpu.fence_reason == reason:
        return gpu
    Gpu.objects.filter(pk=gpu.pk).update(fenced=fenced, fence_reason=reason if fenced else "")
    who = getattr(actor, "username", "") or "an admin"
    if fenced:
        message = f"{gpu}: fenced by {who} ({reason}); no new work, running work keeps it"
    else:
        message = (f"{gpu}: unfenced by {who}" + (f" ({reason})" if reason else "")
                   + f"; health as its agent last reported: {gpu.health}"
                   + (f" ({gpu.health_reason})" if gpu.health_reason else ""))
    record_event("gpu_fenced" if fenced else "gpu_unfenced", message, actor=actor, node=node,
                 data={"index": index, "reason": reason, "previous_reason": gpu.fence_reason,
                       "agent_health": gpu.health, "agent_health_reason": gpu.health_reason})
    request_cycle_on_commit()
    gpu.refresh_from_db()
    return gpu


@transaction.atomic
def set_node_gpu_sharing(node: Node, sharing: str, gpus: list[int] | None = None, *, actor=None) -> list[Gpu]:
    """Set the sharing mode (exclusive, shared or auto) of GPUs `gpus` (indexes) of `node`, or, with `gpus`
    None, of every GPU of the node not in MIG mode; all or none (one transaction), one `gpu_sharing` Event
    per GPU whose mode changes (set_gpu_sharing). Returns the GPUs in index order. Raises ValidationError:
    "sharing" (unknown mode, mig, a GPU in MIG mode), "gpus" (an empty list: an empty list never means "every
    GPU"; an index given twice; no such GPU, or one in use), as set_gpu_sharing."""
    if gpus is not None and not gpus:
        raise ValidationError({"gpus": "name at least one GPU index, or leave gpus out for every GPU of the node"})
    if gpus is not None and len(set(gpus)) != len(gpus):
        raise ValidationError({"gpus": f"GPU index {next(g for g in gpus if gpus.count(g) > 1)} is given twice"})
    if gpus is None:
        gpus = list(node.gpus.exclude(sharing=Gpu.Sharing.MIG).order_by("index").values_list("index", flat=True))
        if not gpus:
            raise ValidationError({"gpus": f"node {node.name} has no GPU outside MIG mode"})
    out = []
    for index in sorted(set(gpus)):
        try:
            out.append(set_gpu_sharing(node, index, sharing, actor=actor))
        except ValidationError as exc:
            raise ValidationError({("gpus" if k == "index" else k): v for k, v in exc.errors.items()}) from None
    return out


def _lock_uuids(gpus: list[dict]) -> None:
    """Hold, until the registration commits, a lock on each GPU and MIG instance UUID it lists (lock_name "gpu
    uuid", on its uuid_key: one lock for a UUID in any letter case, and one namespace for GPUs and instances), in sorted
    order: two registrations listing one UUID run one after the other, so the second reads the first's row and
    _uuids_held_elsewhere refuses it. (Trial 18, finding 1: two nodes registering one new UUID at once were both
    answered 201, and a cycle bound a job on each of them to that one GPU; the check locked only rows that already
    existed.)"""
    uuids = {uuid_key(g["uuid"]) for g in gpus if isinstance(g.get("uuid"), str) and g["uuid"]}
    uuids |= {uuid_key(inst["uuid"]) for g in gpus if isinstance(g.get("mig"), list) for inst in g["mig"]
              if isinstance(inst, dict) and isinstance(inst.get("uuid"), str) and inst["uuid"]}
    for uuid in sorted(uuids):
        lock_name("gpu uuid", uuid)


def _uuids_held_elsewhere(name: str, gpus: list[dict]) -> tuple[dict[str, str], dict[int, Gpu]]:
    """(errors, moves). errors: {"gpus[i].uuid": why} for each GPU whose UUID another node already holds: a UUID names
    one physical GPU, so two nodes listing it (a cloned node image, a second agent on one host under another
    --node-name) would let two jobs be bound to one GPU (new-user trial 15, F4). The other node must re-register
    without it or be deleted. Except a GPU its node's last registration no longer listed, kept for its history
    (Gpu.out_of_service "not_reported"): it was moved to this node, and `moves` maps i to its row (locked), which
    _move_gpus takes over (trial 17c, G14: the new node's registration was refused for good). Refused while a live
    allocation holds it (its job is still on the old node until failure detection requeues it). A MIG instance's UUID
    likewise: another GPU's is refused; a moved GPU's instances, listed under it, move with it. And a UUID names one
    device: a MIG instance's that is a stored GPU's (any node's, this one's too) is refused ("gpus[i].mig[k].uuid"), as
    is a GPU's that is a stored MIG instance's ("gpus[i].uuid"). UUIDs compare by uuid_key (letter case ignored)."""
    wanted = {uuid_key(g["uuid"]): i for i, g in enumerate(gpus) if g.get("uuid")}
    held = [gpu for gpu in _uuid_in(Gpu.objects.select_for_update(of=("self",)), wanted).exclude(node__name=name)
            .select_related("node").order_by("node__name", "index") if uuid_key(gpu.uuid) in wanted]
    live: dict[int, list[str]] = {}
    lost = [g.pk for g in held if g.out_of_service == Gpu.OutOfService.NOT_REPORTED]
    for gpu_id, job in (Allocation.objects.filter(gpu_id__in=lost, released_at__isnull=True)
                        .values_list("gpu_id", "job__name").order_by("job__name").distinct()):
        live.setdefault(gpu_id, []).append(job)
    out, moves = {}, {}
    rows_of = Counter(uuid_key(gpu.uuid) for gpu in held)
    for gpu in held:
        i, other = wanted[uuid_key(gpu.uuid)], gpu.node.name
        sent = _same_words(gpus[i]["uuid"], gpu.uuid)
        if gpu.out_of_service != Gpu.OutOfService.NOT_REPORTED or rows_of[uuid_key(gpu.uuid)] > 1:
            out[f"gpus[{i}].uuid"] = (f"uuid {sent} is GPU {gpu.index} of node {other}: a GPU belongs to one node "
                                      f"(re-register {other} without it, or delete {other}, first)")
        elif gpu.pk in live:
            jobs = live[gpu.pk]
            out[f"gpus[{i}].uuid"] = (f"uuid {sent} is GPU {gpu.index} of node {other}, which {other}'s last "
                                      f"registration no longer listed, but job {', '.join(jobs[:3])}"
                                      f"{', ...' if len(jobs) > 3 else ''} still holds it there (a live allocation): a "
                                      f"GPU moves to another node only once no task holds it (failure detection "
                                      f"requeues that job); register again then")
        else:
            moves[i] = gpu
    # a GPU's UUID that is a stored MIG instance's (a UUID names one device)
    if wanted:
        for uuid, profile, other, index in (_uuid_in(MigInstance.objects, wanted)
                                            .values_list("uuid", "profile", "gpu__node__name", "gpu__index")
                                            .order_by("uuid")):
            i = wanted.get(uuid_key(uuid))
            if i is not None and f"gpus[{i}].uuid" not in out:
                out[f"gpus[{i}].uuid"] = (f"uuid {_same_words(gpus[i]['uuid'], uuid)} is MIG instance {profile} of GPU "
                                          f"{index} of node {other}: {ONE_DEVICE}, letter case ignored")
    # a MIG instance's UUID too (trial 17c, G2: a registration took another node's instance, a live one included)
    instances = {uuid_key(inst["uuid"]): (i, k) for i, g in enumerate(gpus) if isinstance(g.get("mig"), list)
                 for k, inst in enumerate(g["mig"]) if isinstance(inst, dict) and inst.get("uuid")}
    if instances:
        taken = (_uuid_in(MigInstance.objects, instances).exclude(gpu__node__name=name)
                 .values_list("uuid", "gpu_id", "gpu__node__name", "gpu__index").order_by("uuid"))
        listed_as = {wanted[uuid_key(g.uuid)]: g.pk for g in held}  # i -> the other node's row of gpus[i]
        for uuid, gpu_id, other, index in taken:
            if uuid_key(uuid) not in instances:
                continue
            i, k = instances[uuid_key(uuid)]
            if listed_as.get(i) == gpu_id:
                continue  # an instance of that GPU, listed under it: it moves with it (or gpus[i].uuid says why not)
            out[f"gpus[{i}].mig[{k}].uuid"] = (f"uuid {_same_words(gpus[i]['mig'][k]['uuid'], uuid)} is a MIG "
                                               f"instance of GPU {index} of node {other}: an instance belongs to one "
                                               f"GPU (re-register {other} without it first)")
        # ... and not a stored GPU's, of any node (this one's too: a task given it would get that whole GPU)
        for uuid, other, index in (_uuid_in(Gpu.objects, instances).values_list("uuid", "node__name", "index")
                                   .order_by("node__name", "index")):
            if uuid_key(uuid) not in instances:
                continue
            i, k = instances[uuid_key(uuid)]
            out.setdefault(f"gpus[{i}].mig[{k}].uuid", f"uuid {_same_words(gpus[i]['mig'][k]['uuid'], uuid)} is the "
                                                       f"UUID of GPU {index} of node {other}: {ONE_DEVICE}, letter "
                                                       f"case ignored")
    return out, moves


def _move_gpus(node: Node, gpus: list[dict], moves: dict[int, Gpu], *, actor=None) -> list[dict]:
    """Take over each row of `moves` ({i: a GPU another node no longer lists}, _uuids_held_elsewhere) as GPU
    gpus[i]["index"] of `node`: the row moves with its history (allocations, MIG instances, telemetry, XIDs); its
    health is then set from this registration (register_node), its sharing back to exclusive unless it is in MIG mode
    (the old node's admin chose that mode; MIG is the GPU's own, and _sync_mig follows the report). A row of `node`
    at that index (the GPU that was in that slot) gets a free index above the others, so that _lost_gpus removes it,
    or keeps it unhealthy when it has a history, as any GPU a registration no longer lists. The old node's gpu_count
    is its remaining GPUs. A `gpu_moved` Event per GPU. Returns the moves, as its Events' data."""
    if not moves:
        return []
    used = set(Gpu.objects.filter(node=node).values_list("index", flat=True)) | {g["index"] for g in gpus}
    free = iter(_free_indices(used, len(moves)))  # (not max + 1: index 32767 is the column's last)
    done = []
    for i, row in sorted(moves.items()):
        index, old = gpus[i]["index"], row.node
        slot = Gpu.objects.filter(node=node, index=index).first()
        if slot is not None:
            Gpu.objects.filter(pk=slot.pk).update(index=next(free))
        history = Allocation.objects.filter(gpu=row).count()
        fields = {"node": node, "index": index}
        if row.sharing != Gpu.Sharing.MIG:
            fields["sharing"] = Gpu.Sharing.EXCLUSIVE
        Gpu.objects.filter(pk=row.pk).update(**fields)
        Node.objects.filter(pk=old.pk).update(gpu_count=Gpu.objects.filter(node=old).count())
        data = {"uuid": row.uuid, "from_node": old.name, "from_index": row.index, "to_node": node.name,
                "to_index": index, "allocations": history}
        record_event("gpu_moved", f"GPU {row.uuid} moved from {old.name} (gpu{row.index}, not reported at its last "
                     f"registration) to {node.name} (gpu{index}); its history ({history} allocation(s)) moves with it",
                     actor=actor, node=node, data=data)
        done.append(data)
    return done


@transaction.atomic
def register_node(name: str, *, flavor: str, gpus: list[dict], cpu_milli: int = 0, memory_mib: int = 0,
                  labels: dict | None = None, actor=None, executor: str | None = None, address: str | None = None,
                  runtime: str | None = None, accept: bool = True) -> Node:
    """Create or update node `name` and its GPUs. `gpus`: [{index, uuid, numa_node, health, health_reason}].
    A GPU is its UUID: a reported UUID is the node's row with that UUID wherever its index moved (NVML renumbers the
    GPUs after one fallen off the bus), with its history and allocations; rows and entries without a UUID match by
    index (_match_gpus, _place_gpus; the node_registered Event's `renumbered` lists the moves).
    GPUs the node no longer reports are removed, or kept as unhealthy when a task ever ran on them (_lost_gpus;
    gpu_count counts them), at an index no reported GPU uses. The domain and state of an existing node are kept.
    `executor` ("agent" when a node agent registers; None keeps the node's), `address` (where other
    nodes reach it: MASTER_ADDR), `runtime` (its agent's container runtime: docker, podman or "").
    `accept=False`: a node created by this call joins cordoned, awaiting an admin's acceptance
    (uncordon_node); an existing node keeps its state either way.
    A GPU (UUID) another node no longer reports, kept there for its history, moves here with it (_move_gpus).
    Raises ValidationError: a name that breaks the name rule (names.py) or is another node's but for letter case
    (NODE_NAME_RULE, node_name_taken; "name"), an empty flavor, negative cpu/memory, bad GPU index or health, unknown
    executor or runtime, a GPU UUID given twice or held by another node ("gpus[i].uuid": one it still lists, or one
    a live allocation still holds there) or a stored MIG instance's, a MIG instance UUID given twice, another GPU's
    instance's, or a GPU's, in this registration or stored ("gpus[i].mig[k].uuid": a UUID names one device), a MIG
    instance without uuid or profile, or beyond its columns ("gpus[i].mig[k]", its ".uuid" or ".profile"). UUIDs
    compare by uuid_key (letter case ignored); each is stored as the agent sent it."""
    errors = {}
    if message := name_error("node", name):  # every per-node URL must be able to name it (new-user trial 13, F2)
        errors["name"] = message
    if not flavor:
        errors["flavor"] = "flavor (GPU model) must not be empty"
    if not isinstance(cpu_milli, int) or cpu_milli < 0:
        errors["cpu_milli"] = "cpu_milli must be an integer >= 0"
    if not isinstance(memory_mib, int) or memory_mib < 0:
        errors["memory_mib"] = "memory_mib must be an integer >= 0"
    errors.update(_check_gpus(gpus))
    if executor is not None and executor not in Node.Executor.values:
        errors["executor"] = f"executor must be one of {one_of(Node.Executor.values)}"
    if runtime not in (None, "", "docker", "podman"):
        errors["runtime"] = "runtime must be docker, podman or empty"
    if address is not None and (not isinstance(address, str) or len(address) > 200):
        errors["address"] = "address must be a host name or IP address of at most 200 characters"
    if "name" not in errors:
        lock_name("node name", name.casefold())  # two registrations of GPU-01 and gpu-01 at once: one at a time
        if (holder := node_name_clash(name)) is not None:
            errors["name"] = node_name_taken(holder)
    moves = {}
    if not errors:
        _lock_uuids(gpus)
        held, moves = _uuids_held_elsewhere(name, gpus)
        errors.update(held)
    if errors:
        raise ValidationError(errors)
    now = clock.now()
    node, created = Node.objects.get_or_create(name=name, defaults={
        "flavor": flavor, "gpu_count": len(gpus), "state_since": now,
        "state_reason": "registered" if accept else "registered: awaiting an admin's acceptance (uncordon it)",
        **({} if accept else {"state": Node.State.CORDONED})})
    merged = {**(node.labels if isinstance(node.labels, dict) else {}), **(labels or {})}  # (a non-object stored
    # before the admin took the registration's label rule: trial 17c, G6) is replaced, not a 500
    extra = {k: v for k, v in (("executor", executor), ("address", address), ("container_runtime", runtime))
             if v is not None}
    # one registration (or heartbeat) of a node at a time: the renumbering below reads and moves all its GPU rows
    Node.objects.select_for_update().filter(pk=node.pk).first()
    was = dict(Gpu.objects.filter(node=node).values_list("pk", "index"))  # before anything moves (_move_gpus too)
    _move_gpus(node, gpus, moves, actor=actor)
    rows, kept = _place_gpus(node, gpus)
    lost = [row.index for row in kept]
    Node.objects.filter(pk=node.pk).update(flavor=flavor, gpu_count=len(gpus) + len(lost), cpu_milli=cpu_milli,
                                           memory_mib=memory_mib, labels=merged, last_heartbeat=now, **extra)
    for i, g in enumerate(gpus):
        # (an entry without a UUID keeps the one stored: blanking it let another node claim it; trial 18, finding 6)
        fields = {**({"uuid": g["uuid"]} if g.get("uuid") else {}), "numa_node": g.get("numa_node"),
                  "health": g.get("health", "healthy"), "health_reason": (g.get("health_reason") or "")[:200],
                  "out_of_service": Gpu.OutOfService.NO,  # reported: usable again, unless _sync_mig holds it
                  **({"memory_mib": g["memory_mib"]} if g.get("memory_mib") is not None else {})}
        gpu = rows.get(i)
        if gpu is None:
            gpu = Gpu.objects.create(node=node, index=g["index"], **{"uuid": "", **fields})
        else:
            Gpu.objects.filter(pk=gpu.pk).update(**fields)
        _sync_mig(gpu, g)
    # which GPU (UUID) moved from which index to which: NVML renumbered those after one fallen off the bus, or a row
    # the registration no longer lists went aside to a free index (lost: true)
    aside = {row.pk for row in kept}
    now_at = {pk: (uuid, index) for pk, uuid, index in Gpu.objects.filter(node=node, pk__in=list(was))
              .values_list("pk", "uuid", "index")}  # the rows that stay on the node, where they are now
    renumbered = sorted(({"uuid": uuid, "from": was[pk], "to": index, **({"lost": True} if pk in aside else {})}
                         for pk, (uuid, index) in now_at.items() if was[pk] != index), key=lambda r: (r["from"], r["to"]))
    if renumbered or len(was) != len(now_at):
        _follow_holds(node, {was[pk]: now_at[pk][1] if pk in now_at else None for pk in was}, at=now)
    node.refresh_from_db()
    if _carries_inventory(gpus):
        audit_topology(node, gpus, at=now, actor=actor)
        Node.objects.filter(pk=node.pk).update(inventory={"audited_at": now.isoformat(), "gpus": len(gpus)})
    record_event("node_registered", f"{name} {'registered' if created else 're-registered'}: {len(gpus)} x {flavor}"
                 + (f"; renumbered: {', '.join(_moved_words(r) for r in renumbered)}" if renumbered else "")
                 + (f"; not reported, kept as unhealthy: {', '.join(f'gpu{i}' for i in lost)}" if lost else ""),
                 actor=actor, node=node, data={"gpus": len(gpus), "flavor": flavor, "created": created,
                                               **({"renumbered": renumbered} if renumbered else {}),
                                               **({"lost_gpus": lost} if lost else {})})
    if created and not accept:
        record_event("node_awaiting_acceptance", f"{name} joined cordoned: an admin accepts it by uncordoning it "
                     f"(its agent's token does not name it)", actor=actor, node=node, data={})
    return node


LOST_GPU_REASON = "not reported at the node's last registration (gone from NVML: e.g. fallen off the bus)"


def _follow_holds(node: Node, to: dict[int, int | None], *, at) -> None:
    """The GPUs held for pending jobs (Job.reserved: [[role, index, node, GPU indices]], scheduling.evict) follow
    this registration's renumbering of `node` (`to`: {a row's index before: its index now, None when
    it left the node}): a hold names GPUs by index, so a
    hold on a GPU whose index moved names its new index, not the GPU now at the old one; a hold on a GPU that left
    the node (removed, or moved to another node) is dropped whole, with a hold_dropped Event, as a cycle drops a hold
    whose GPU is gone (apply_holds). (Trial 18c: holds kept the old indices.)"""
    from ..models import Job
    from ..scheduling.evict import HOLDER_STATES

    if all(to[i] == i for i in to):
        return
    dropped = []
    for job in Job.objects.select_for_update().filter(state__in=HOLDER_STATES, reserved__isnull=False).order_by("pk"):
        entries = job.reserved if isinstance(job.reserved, list) else []
        mine = [e for e in entries if isinstance(e, list) and len(e) >= 4 and e[2] == node.name]
        if not mine:
            continue
        if any(to.get(g, g) is None for e in mine for g in e[3]):
            Job.objects.filter(pk=job.pk).update(reserved=None)
            dropped.append((job.pk, entries))
            continue
        moved = [[*e[:3], [to.get(g, g) for g in e[3]], *e[4:]] if e in mine else e for e in entries]
        if moved != entries:
            Job.objects.filter(pk=job.pk).update(reserved=moved)
    if dropped:
        record_events({"time": at, "kind": "hold_dropped", "job_id": job_id, "node_id": node.pk,
                       "message": f"GPUs held for this job were given up: a GPU they were on left node {node.name}",
                       "data": {"reserved": reserved}} for job_id, reserved in dropped)


def _moved_words(r: dict) -> str:
    return f"{r['uuid'] or '(no uuid)'} gpu{r['from']} -> gpu{r['to']}" + (" (not reported)" if r.get("lost") else "")


def _free_indices(taken: set[int], n: int) -> list[int]:
    """The `n` smallest GPU indices >= 0 not in `taken`."""
    out, i = [], 0
    while len(out) < n:
        if i not in taken:
            out.append(i)
        i += 1
    return out


def _match_gpus(rows: list[Gpu], gpus: list[dict]) -> dict[int, Gpu]:
    """{i: the row of the node that is GPU gpus[i]}. A GPU's identity is its UUID: a reported UUID is the node's row
    with that UUID wherever its index is (NVML numbers the GPUs it sees 0..n-1, so one fallen off the bus renumbers
    those after it). A row without a UUID (registered by a client that gave none), and an entry without one, match by
    index as before, when that row is not another entry's by UUID. A row with another UUID at the entry's index is
    never taken over: that GPU is gone (or replaced) and keeps its own history. UUIDs compare by uuid_key."""
    by_uuid: dict[str, list[Gpu]] = {}
    for row in rows:
        if row.uuid:
            by_uuid.setdefault(uuid_key(row.uuid), []).append(row)
    matched: dict[int, Gpu] = {}
    taken: set[int] = set()
    for i, g in enumerate(gpus):
        same = [row for row in by_uuid.get(uuid_key(g.get("uuid") or ""), ()) if row.pk not in taken]
        if same:  # (two rows with one UUID only where an older registration wrote them: the one at its index first)
            row = next((r for r in same if r.index == g["index"]), same[0])
            matched[i] = row
            taken.add(row.pk)
    at = {row.index: row for row in rows}
    for i, g in enumerate(gpus):
        row = at.get(g["index"])
        if i not in matched and row is not None and row.pk not in taken and not (row.uuid and g.get("uuid")):
            matched[i] = row
            taken.add(row.pk)
    return matched


def _place_gpus(node: Node, gpus: list[dict]) -> tuple[dict[int, Gpu], list[Gpu]]:
    """Give each of `node`'s GPU rows its place for this registration. ({i: the row of gpus[i]; none for a new GPU,
    which the caller creates at its index}, the rows kept as lost, in index order.) Each row _match_gpus finds takes
    the reported index with its history, allocations (a live one included: its task runs on), MIG instances and
    telemetry. The rows no entry matches are the GPUs the registration no longer lists (_lost_gpus): removed, or kept
    at their index when no reported GPU uses it, else at the lowest free one (the snapshot counts an index with no
    reported GPU as unhealthy). The (node, index) constraint is checked row by row, so the rows that change index
    first go to free indices no row or target uses, then to their own (a permutation never collides)."""
    rows = list(Gpu.objects.select_for_update().filter(node=node).order_by("index"))
    matched = _match_gpus(rows, gpus)
    mine = {row.pk for row in matched.values()}
    kept = _lost_gpus([row for row in rows if row.pk not in mine])
    target = {row.pk: gpus[i]["index"] for i, row in matched.items()}
    reported = {g["index"] for g in gpus}
    staying = {row.index for row in kept if row.index not in reported}
    aside = [row for row in kept if row.index in reported]
    for row, index in zip(aside, _free_indices(reported | staying, len(aside))):
        target[row.pk] = index
    for row in kept:
        target.setdefault(row.pk, row.index)
    movers = [row for row in rows if row.pk in target and row.index != target[row.pk]]
    if movers:
        busy = {row.index for row in rows if row.pk in target} | set(target.values())
        for row, temporary in zip(movers, _free_indices(busy, len(movers))):
            row.index = temporary
        Gpu.objects.bulk_update(movers, ["index"])
        for row in movers:
            row.index = target[row.pk]
        Gpu.objects.bulk_update(movers, ["index"])
    return matched, sorted(kept, key=lambda row: row.index)


def _lost_gpus(gone: list[Gpu]) -> list[Gpu]:
    """The GPUs of a node that its registration no longer reports (`gone`: _place_gpus): removed when nothing was ever
    allocated on them; kept, held unhealthy (LOST_GPU_REASON; Gpu.out_of_service "not_reported"), when an allocation
    names them (its history stays, and a task still on one is then stopped and requeued by failure detection, as on
    any unhealthy GPU). Returns the kept ones. New-user trial 16b, F7: a node that re-registered with a GPU fewer was
    answered 409 "still referenced by other objects", naming no field, and could not register at all while that GPU
    had ever run a task."""
    if not gone:
        return []
    used = set(Allocation.objects.filter(gpu_id__in=[row.pk for row in gone]).values_list("gpu_id", flat=True)
               .distinct())
    Gpu.objects.filter(pk__in=[row.pk for row in gone if row.pk not in used]).delete()
    kept = [row for row in gone if row.pk in used]
    marked = (Gpu.Health.UNHEALTHY, LOST_GPU_REASON, Gpu.OutOfService.NOT_REPORTED)
    stale = [row.pk for row in kept if (row.health, row.health_reason, row.out_of_service) != marked]
    if stale:  # one UPDATE for them all; none when they are already so marked (a node re-registering as it was)
        Gpu.objects.filter(pk__in=stale).update(health=marked[0], health_reason=marked[1], out_of_service=marked[2])
    return kept


# Node names are host names, which DNS compares without letter case (RFC 4343): `GPU-01` registering next to
# `gpu-01` is the same machine named twice, whose GPUs would be counted twice (trial 21, F9: the queue name rule's
# kind of fault). Separators are kept: `gpu-01` and `gpu01` are two host names.
NODE_NAME_RULE = "node names are host names, which do not differ by letter case (GPU-01 and gpu-01 are one machine)"


def node_name_clash(name: str, other_than: int | None = None) -> str | None:
    """The name of a node other than `name` itself (and other than the node of id `other_than`: a rename) that
    `name` is by the node name rule (NODE_NAME_RULE: letter case ignored), or None."""
    rows = Node.objects.filter(name__iexact=name).exclude(name=name)
    if other_than is not None:
        rows = Node.objects.filter(name__iexact=name).exclude(pk=other_than)
    return rows.order_by("pk").values_list("name", flat=True).first()


def node_name_taken(holder: str) -> str:
    """The one wording of a node name that is node `holder`'s by the rule (register_node, the admin's rename)."""
    return (f"a node named {holder!r} is registered already: {NODE_NAME_RULE}; register it as {holder!r} "
            f"(its agent's --node-name {holder}), or rename that node first")


@transaction.atomic
def follow_node_rename(old: str, new: str, *, actor=None) -> int:
    """After node `old` was renamed `new` (the admin's node form): every node-agent scope naming `old` names `new`
    instead, so its token keeps covering the node once its agent runs with --node-name NEW, and a `node_renamed`
    Event records it (trial 17c, G11: the rename cut the agent off with a 403 for the new name). Returns the number
    of scopes changed."""
    from ..models import NodeAgentScope

    changed = 0
    for scope in NodeAgentScope.objects.select_for_update().order_by("pk"):  # (JSON containment: not on SQLite)
        if old not in (scope.nodes or ()):
            continue
        scope.nodes = [new if n == old else n for n in scope.nodes]
        scope.save(update_fields=["nodes"])
        changed += 1
    node = Node.objects.filter(name=new).first()
    record_event("node_renamed", f"node {old} renamed {new}: its agent must run with --node-name {new} "
                 f"({changed} agent token scope(s) follow)", actor=actor, node=node,
                 data={"from": old, "to": new, "scopes": changed})
    return changed


@transaction.atomic
def issue_node_agent_token(nodes: list[str], *, actor=None, username: str | None = None) -> str:
    """A node-agent API token scoped to `nodes` (node names; see models.NodeAgentScope): its user
    (`username`, default "agent-<first node>") is created in the node-agents group if needed, its scope set
    to `nodes`, and a fresh token (hashed, valid AGENT_TOKEN_TTL_DAYS: services/tokens.py) replaces any it
    had. Returns the token, which is not stored and cannot be shown again. Raises ValidationError ("nodes")
    for an empty list, a blank name or one that breaks the node name rule ("*" is every node); ("username") for an
    existing user that is not a node agent's (not in the node-agents group, or staff, or a team member): the
    token's user gets an unusable password and loses its other tokens."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from ..models import NodeAgentScope
    from .tokens import agent_token_ttl, issue_api_token, revoke_api_tokens

    if not nodes or any(not isinstance(n, str) or not n.strip() for n in nodes):
        raise ValidationError({"nodes": "name at least one node (or \"*\" for every node)"})
    bad = next((n for n in nodes if n != "*" and name_error("node", n)), None)
    if bad is not None:  # a node of that name can never register (trial 17, F9: 'bad name' got a token)
        raise ValidationError({"nodes": f"{bad!r}: {name_error('node', bad)}"})
    User = get_user_model()
    if username is not None:  # one given: Django's own username rule (150 characters: letters, digits, @.+-_; trial
        # 17c, G1: ' ', 'a b' and control characters were taken, 200 characters a traceback). The default,
        # agent-<first node>, is the name earlier tokens were issued under ('agent-*' for every node): kept
        try:
            User._meta.get_field("username").run_validators(username)
            if not username:
                raise DjangoValidationError("a user name is required")
        except DjangoValidationError as exc:
            raise ValidationError({"username": f"{username!r}: {' '.join(exc.messages)}"}) from None
    username = f"agent-{nodes[0]}"[:150] if username is None else username
    existing = User.objects.filter(username=username).first()
    if existing is not None and (existing.is_staff or existing.is_superuser or existing.memberships.exists()
                                 or not existing.groups.filter(name="node-agents").exists()):
        # the agent's user gets an unusable password and loses every token: never a person's account (trial 17, F9:
        # `--user admin` locked the only superuser out of the admin, the pages and the API)
        raise ValidationError({"username": f"user {username!r} is a person's account, not a node agent's (not in the "
                                           f"node-agents group, or staff, or a team member): a node-agent token "
                                           f"would make its password unusable and revoke its tokens; name a new "
                                           f"user, or an existing node-agent user"})
    user, _ = User.objects.get_or_create(username=username)
    user.set_unusable_password()
    user.save()
    user.groups.add(Group.objects.get_or_create(name="node-agents")[0])
    NodeAgentScope.objects.update_or_create(user=user, defaults={"nodes": list(nodes)})
    revoke_api_tokens(user, actor=actor)
    token, _ = issue_api_token(user, ttl=agent_token_ttl(), actor=actor, purpose="node-agent")
    record_event("agent_token_issued", f"node-agent token for {', '.join(nodes)} issued to {user.username}",
                 actor=actor, data={"nodes": list(nodes), "user": user.username})
    return token


@transaction.atomic
def record_heartbeat(name: str, *, gpus: list[dict], at: datetime | None = None, node_time: datetime | None = None,
                     actor=None) -> Node:
    """Store a heartbeat: last_heartbeat = `at`, the time the SERVER received it (default: the cluster
    clock; never the node's own clock, which drifts) and each reported GPU's health ({index, health,
    health_reason}, and `uuid`: then the GPU of that UUID (uuid_key: letter case ignored) on this node wherever its
    index is, none when the node has no such GPU). `node_time`, the time the node put in it, is kept only as the node's clock offset
    (Node.clock_offset_seconds), and only within NODE_CLOCK_MAX_OFFSET_SECONDS of `at`: further out the offset
    is cleared, the returned node's `clock_warning` says why and a `node_clock` Event flags it (hourly at most). A not_ready node returns to the state it had (node_states.py). Raises ValidationError: unknown
    node ("name": register first), bad GPU entries, a GPU index the node does not have."""
    node = Node.objects.select_for_update().filter(name=name).first()
    if node is None:
        raise ValidationError({"name": f"unknown node {name!r}: register it first"})
    errors = _check_gpus(gpus)
    have = {g.index: g for g in Gpu.objects.filter(node=node)}
    # an entry that names its GPU's UUID is that GPU's, at whatever index the server holds it (the node may have been
    # registered again since: trial 18, finding 2, a lost GPU's health landed on its neighbour and the wrong job was
    # requeued); a UUID this node does not hold is not applied (the agent registers again when its numbering changes).
    # UUIDs compare by uuid_key (letter case ignored), as registration does
    by_uuid = {uuid_key(row.uuid): row for row in have.values() if row.uuid}
    rows = []
    for i, g in enumerate(gpus):
        uuid = g.get("uuid") if isinstance(g, dict) and isinstance(g.get("uuid"), str) and g.get("uuid") else None
        if uuid is not None:
            rows.append(by_uuid.get(uuid_key(uuid)))
        elif isinstance(g, dict) and isinstance(g.get("index"), int) and g["index"] not in have:
            errors[f"gpus[{i}].index"] = f"node {name} has no GPU {g['index']}"
        else:
            rows.append(have.get(g.get("index")) if isinstance(g, dict) else None)
    if errors:
        raise ValidationError(errors)
    # the entries as this server numbers the node's GPUs, for the health rules, the audit and validation below
    gpus = [{**g, "index": row.index} for g, row in zip(gpus, rows) if row is not None]
    changes = []
    for g in gpus:
        row = have[g["index"]]
        if row.out_of_service:
            # held unhealthy by the node's registration (a GPU it no longer lists, a MIG layout changed under a
            # job): only a registration changes that (trial 17c, G4: a heartbeat made a lost GPU healthy again)
            continue
        health, reason = g.get("health", "healthy"), (g.get("health_reason") or "")[:200]
        if (row.health, row.health_reason) != (health, reason):
            changes.append({"index": row.index, "from": row.health, "to": health, "reason": reason})
            Gpu.objects.filter(pk=row.pk).update(health=health, health_reason=reason)
    at = at or clock.now()
    offset = round((node_time - at).total_seconds(), 3) if node_time is not None else None
    warning = clock_warning(offset)
    Node.objects.filter(pk=node.pk).update(last_heartbeat=at, clock_offset_seconds=None if warning else offset)
    if warning:
        _flag_clock(node, offset, warning, at=at, actor=actor)
    if changes:
        record_event("gpu_health", f"{name}: " + "; ".join(f"gpu{c['index']} {c['from']} -> {c['to']}"
                                                         + (f" ({c['reason']})" if c["reason"] else "") for c in changes),
                     actor=actor, node=node, data={"changes": changes}, time=at)
    if node.state == Node.State.NOT_READY:  # back to the state it had before it went silent: cordoned stays cordoned
        node_states.transition(node, node.resume_state or Node.State.READY, reason="heartbeat", actor=actor, at=at)
    judge_gpu_signals(node, gpus, at=at, actor=actor)  # health rules (diagnosis/health.py)
    _periodic_audit(node, gpus, at, actor)
    node.refresh_from_db()
    if node.state == Node.State.VALIDATING and not (node.validation or {}).get("check_command"):
        check = validation_check(node, gpus)
        record_validation(node, passed=check["passed"], detail="; ".join(check["problems"]) or "every GPU visible and "
                          "healthy, topology labels agree", actor=actor, at=at)
        node.refresh_from_db()
    node.clock_warning = warning  # for the heartbeat's answer (api/views/cluster.py)
    return node


def clock_warning(offset: float | None) -> str:
    """Why a node clock `offset` seconds from the server's (node minus server) is not kept, or "" when it is (None:
    no time sent). New-user trial 13, F13: a heartbeat with year 9999 was stored as a 7,978-year clock offset,
    which telemetry timestamps are then shifted by."""
    from django.conf import settings

    bound = float(getattr(settings, "NODE_CLOCK_MAX_OFFSET_SECONDS", 366 * 86400))
    if offset is None or abs(offset) <= bound:
        return ""
    years = abs(offset) / (365.25 * 86400)
    size = f"{years:,.0f} years" if years >= 1 else f"{abs(offset) / 86400:,.1f} days"
    return (f"the node's clock is {abs(offset):,.0f} s ({size}) {'ahead of' if offset > 0 else 'behind'} the "
            f"server's: more than NODE_CLOCK_MAX_OFFSET_SECONDS ({bound:,.0f}); the heartbeat counts (the server's "
            f"receive time), but this time is not kept as the node's clock offset: set the node's clock (NTP)")


CLOCK_EVENT_EVERY_SECONDS = 3600


def _flag_clock(node: Node, offset: float, warning: str, *, at: datetime, actor) -> None:
    """A `node_clock` Event for a node whose clock is off beyond the bound, at most once an hour per node (its
    heartbeats come every few seconds)."""
    if Event.objects.filter(kind="node_clock", node=node, time__gt=at - timedelta(seconds=CLOCK_EVENT_EVERY_SECONDS),
                            time__lte=at).exists():
        return
    record_event("node_clock", f"{node.name}: {warning}", actor=actor, node=node, data={"offset_seconds": offset},
                 time=at)


def _carries_inventory(gpus: list[dict]) -> bool:
    """Whether a register or heartbeat body carries the topology inventory (GPU models, NVLink peers)."""
    return any(g.get("model") or g.get("nvlink_peers") for g in gpus)


def _periodic_audit(node: Node, gpus: list[dict], at: datetime, actor) -> None:
    """The topology audit from a heartbeat that carries the inventory, at most every TOPOLOGY_AUDIT_SECONDS
    (and at every heartbeat of a validating node)."""
    from django.conf import settings
    from django.utils.dateparse import parse_datetime

    if not _carries_inventory(gpus):
        return
    last = parse_datetime((node.inventory or {}).get("audited_at") or "")
    every = float(getattr(settings, "TOPOLOGY_AUDIT_SECONDS", 600))
    if node.state != Node.State.VALIDATING and last is not None and (at - last).total_seconds() < every:
        return
    audit_topology(node, gpus, at=at, actor=actor)
    Node.objects.filter(pk=node.pk).update(inventory={**(node.inventory or {}), "audited_at": at.isoformat()})


def _set_node_state(node: Node, state: str, actor, reason: str, at: datetime | None = None) -> Node:
    """An admin's (or the Slurm backend's) cordon, drain or uncordon. Out of service, the node keeps why and since
    when (health_reason: the reason given, else who did it; health_since: now), as a health rule's take_out does:
    the nodes page and the node API show them (new-user trial 15, F3: they stayed empty, the reason only in the
    Event). Back to ready, both are cleared. `at`: the time of the change (default now; the Slurm backend's round)."""
    who = getattr(actor, "username", "") or "an admin"
    done = {Node.State.CORDONED: "cordoned", Node.State.DRAINING: "drained", Node.State.READY: "returned to ready"}
    # the state's reason is never empty for an admin's move (trial 21, F6: a cordon without a reason left the nodes
    # page's "why" blank): the reason given, else who did it
    given = (reason or f"{done.get(state, state)} by {who}")[:300]
    if not node_states.transition(node, state, reason=given, actor=actor, at=at):
        current = Node.objects.filter(pk=node.pk).values_list("state", flat=True).first()
        raise ValidationError({"state": f"node {node.name} changed meanwhile (it is {current}); try again"})
    why, since = ("", None) if state == Node.State.READY else (given, at or clock.now())
    Node.objects.filter(pk=node.pk).update(health_reason=why, health_since=since)
    node.health_reason, node.health_since = why, since
    request_cycle_on_commit()
    return node


@transaction.atomic
def cordon_node(node: Node, *, actor=None, reason: str = "") -> Node:
    """Stop new work landing on a ready node; running work continues. Raises ValidationError("state")."""
    return _set_node_state(node, Node.State.CORDONED, actor, reason)


@transaction.atomic
def drain_node(node: Node, *, actor=None, reason: str = "", at: datetime | None = None) -> Node:
    """Mark a node draining (no new work) and evict every running gang with a task on it gracefully: it
    goes preempting with its queue's grace, then is requeued whole (lifecycle.py). The node stays
    unschedulable until uncordoned. Raises ValidationError("state") for a not_ready node."""
    at = at or clock.now()
    node = _set_node_state(node, Node.State.DRAINING, actor, reason, at)
    evict_jobs_on_nodes([node.pk], at=at, kind="evicted", actor=actor,
                        reason=f"node {node.name} is draining" + (f" ({reason})" if reason else ""))
    return node


@transaction.atomic
def uncordon_node(node: Node, *, actor=None, reason: str = "") -> Node:
    """Return a cordoned or draining node to ready. Raises ValidationError("state") otherwise."""
    return _set_node_state(node, Node.State.READY, actor, reason)


# An admin's repair and validation (diagnosis/health.start_repair, start_validation: the API's .../repair/ and
# .../validate/, the admin's actions) wait until no job holds the node's GPUs (session 27: a cordoned node with a
# 3-GPU job went in_repair, then validating, and its check ran beside the job; the documented check, dcgmi diag -r 2,
# is a GPU diagnostic). Not the platform's own moves: a failed validation (validating -> in_repair) stays automatic.
GPUS_HELD_RULE = {Node.State.IN_REPAIR: "a node goes into repair only once no job holds its GPUs (drained or empty)",
                  Node.State.VALIDATING: "a node is validated only once no job holds its GPUs (its check, e.g. "
                                         "dcgmi diag, runs on them)"}
GPUS_HELD_NAMED = 3  # jobs named in the refusal; "and N more" for the rest


def refuse_while_gpus_held(node: Node, to: str) -> None:
    """Raise ValidationError("state") when an admin's move of `node` to `to` (in_repair or validating) would find a
    job holding the node's GPUs: a live allocation (released_at null) on one of them, whatever the job's state. The
    message names the rule, the jobs (id and name, GPUS_HELD_NAMED of them) and what to do: drain the node first
    (its jobs are stopped with grace and requeued) and repair it once they have stopped, or wait for them to end or
    cancel them. A move the state machine refuses anyway (a ready node sent to repair) is left to it
    (node_states.transition says why); so is any `to` this rule does not name."""
    rule = GPUS_HELD_RULE.get(to)
    state = Node.objects.filter(pk=node.pk).values_list("state", flat=True).first()
    if rule is None or (state, to) not in node_states.TRANSITIONS:
        return
    live = Allocation.objects.filter(gpu__node_id=node.pk, released_at__isnull=True)
    jobs = sorted(set(live.values_list("job_id", "job__name")))
    if not jobs:
        return
    gpus = live.values("gpu_id").distinct().count()
    named = ", ".join(f"{pk} ({name})" if name else str(pk) for pk, name in jobs[:GPUS_HELD_NAMED])
    more = f" and {len(jobs) - GPUS_HELD_NAMED} more" if len(jobs) > GPUS_HELD_NAMED else ""
    one = len(jobs) == 1
    held = (f"node {node.name} is {state} and {gpus} of its GPUs are held by {len(jobs)} live "
            f"{'job' if one else 'jobs'}: {'job' if one else 'jobs'} {named}{more}")
    the_jobs = "the job" if one else "the jobs"
    cancel = f"cancel {'it' if one else 'them'} (POST /api/v1/jobs/{{id}}/cancel/)"
    if state == Node.State.CORDONED:
        todo = (f"drain it first (POST /api/v1/nodes/{node.name}/drain/: its jobs are stopped with grace and "
                f"requeued) and start the repair once they have stopped, or wait for {the_jobs} to end, or {cancel}")
    elif state == Node.State.DRAINING:
        todo = f"it is draining: start the repair once its jobs have stopped (their grace), or {cancel}"
    else:
        todo = f"wait for {the_jobs} to end, or {cancel}, then validate it"
    raise ValidationError({"state": f"{held}; {rule}: {todo}"})


@transaction.atomic
def set_spare(node: Node | str, spare: bool, *, actor=None, at: datetime | None = None) -> Node:
    """Mark a node a hot spare (the scheduler places only interruptible jobs on it; a gang that lost a node
    restarts on it at once, stopping them: scheduler/core/spares.py, scheduling/spares.py) or return it to
    ordinary use (its jobs run on). Event "node_spare" {"spare"} (the GPU-hour ledger counts a spare's idle
    GPUs as held). Raises ValidationError: unknown node ("name"), `spare` not a boolean ("spare"), a node
    that runs tasks of a job that is not interruptible ("spare": a spare runs only interruptible jobs; drain
    it first)."""
    from ..models import Allocation

    name = node if isinstance(node, str) else node.name
    row = Node.objects.select_for_update().filter(name=name).first()
    if row is None:
        raise ValidationError({"name": f"unknown node {name!r}"})
    if not isinstance(spare, bool):
        raise ValidationError({"spare": "spare must be true or false"})
    if row.spare == spare:
        return row
    if spare:
        live = Allocation.objects.filter(gpu__node=row, released_at__isnull=True, job__interruptible=False)
        gpus = live.count()
        if gpus:
            jobs = sorted(set(live.values_list("job__name", flat=True)))
            raise ValidationError({"spare": f"node {name} runs tasks of {len(jobs)} job(s) that are not interruptible "
                                            f"on {gpus} GPUs ({', '.join(jobs[:3])}{', ...' if len(jobs) > 3 else ''});"
                                            f" a spare runs only interruptible jobs: drain it first"})
    Node.objects.filter(pk=row.pk).update(spare=spare)
    record_event("node_spare", f"{name}: " + ("marked a hot spare (interruptible jobs only; failed gangs "
                                              "restart on it)"
                                              if spare else "no longer a spare (takes work again)"),
                 time=at or clock.now(), node=row, actor=actor, data={"spare": spare})
    request_cycle_on_commit()
    row.spare = spare
    return row
