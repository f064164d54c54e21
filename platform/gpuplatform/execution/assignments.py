"""A node's assignments: what its agent must run and stop now (docs/execution.md).

`node_assignments(node, now)` -> {"server_time", "poll_seconds", "stop_grace_seconds", "tasks": [...]}, each
task {task, attempt, job, job_name, role, index, action ("run" | "stop"), state (the task's: "bound" = waiting for
its agent to start it, "running" = reported started, "releasing"; an agent starts only a bound task: one the server
counts running that the agent has no record of is reported lost, never started a second time), stop_deadline (for
"run": the deadline of an eviction still only planned, see scheduling.evict.signal_at), argv, env,
working_dir, image, gpus: [{index, uuid}]}; a fractional task's one GPU entry also has share_milli (its share,
thousandths), share_memory_mib (its GPU memory, MiB) and memory_mib (the GPU's memory, MiB; 0 = unknown), so that
the agent runs tasks sharing a GPU together while their shares sum to at most the GPU. Four queries whatever the
number of tasks.

The environment is computed here, once, for every executor: the role's own variables first, then the
platform's over them:

- CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES: the task's GPUs, by UUID where the node reported one,
  else by index, in GPU index order; a MIG task's instances by their MIG-<uuid> (DESIGN section 12);
- a fractional task (its allocation holds a share): its one GPU as above, and GPUPLATFORM_GPU_FRACTION (the share,
  e.g. "0.25"), GPUPLATFORM_GPU_MEMORY_MIB (its memory, where the GPU's is known), and the CUDA MPS limits
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<MiB>M"), which take effect only
  where an MPS control daemon runs (https://docs.nvidia.com/deploy/mps/); elsewhere the share is advisory;
- torchrun's rendezvous variables (https://pytorch.org/docs/stable/elastic/run.html#environment-variables):
  WORLD_SIZE = the tasks placed in this attempt, RANK = the task's place among them (roles in submission
  order, then task index), NODE_RANK = the place of its node among the job's nodes (in rank order),
  LOCAL_RANK / LOCAL_WORLD_SIZE = its place among / the number of the job's tasks on its node, MASTER_ADDR
  = the address of rank 0's node as its agent registered it (else the node name), MASTER_PORT =
  `master_port(job id, attempt)`;
- GPUPLATFORM_JOB_ID, GPUPLATFORM_ROLE, GPUPLATFORM_TASK_INDEX, GPUPLATFORM_QUEUE, GPUPLATFORM_ATTEMPT.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings

from .. import clock
from ..models import Allocation, Job, Task
from ..scheduling.evict import REQUEUE_STOPS, signal_at

__all__ = ["node_assignments", "nodes_assignments", "master_port", "MASTER_PORT_BASE", "MASTER_PORT_SPAN"]

# Below Linux's default ephemeral range (32768-60999), so a rendezvous port never collides with a
# connection's local port on the same host.
MASTER_PORT_BASE = 20000
MASTER_PORT_SPAN = 12000


def master_port(job_id: int, attempt: int) -> int:
    """The job's rendezvous port: fixed for an attempt, different for the next one (a restarted gang does
    not meet its predecessor's sockets in TIME_WAIT), spread over MASTER_PORT_SPAN ports."""
    return MASTER_PORT_BASE + (job_id * 64 + attempt) % MASTER_PORT_SPAN


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def node_assignments(node, now: datetime | None = None) -> dict:
    """The assignments answer for `node` (a Node) at server time `now` (default: the cluster clock)."""
    return nodes_assignments([node], now)[node.pk]


def nodes_assignments(nodes, now: datetime | None = None) -> dict:
    """{node id: the assignments answer of that node} for many nodes (Node objects) in the same four queries
    (the Slurm backend reads every Slurm node's in one round)."""
    now = now or clock.now()
    nodes = list(nodes)
    rows = list(Task.objects.filter(node__in=nodes, state__in=Task.ON_NODE_STATES, job__simulated=False,
                                    job__state__in=Job.LIVE_STATES)
                .order_by("job_id", "role_id", "index")
                .values("id", "job_id", "node_id", "index", "state", "release_deadline", "release_for", "job__attempts",
                        "job__state", "job__preempt_deadline", "job__evicted_for", "job__stop_target", "job__name", "job__queue__name", "role__name", "role__command",
                        "role__env", "role__working_dir", "role__image"))
    job_ids = {r["job_id"] for r in rows}
    placed: dict[int, list[tuple]] = defaultdict(list)
    for tid, jid, node_id, address, name in (Task.objects.filter(job_id__in=job_ids, node__isnull=False)
                                             .order_by("job_id", "role_id", "index")
                                             .values_list("id", "job_id", "node_id", "node__address", "node__name")):
        placed[jid].append((tid, node_id, address or name))
    # per job, once: task id -> RANK, node id -> NODE_RANK, (job, node) -> the job's task ids there (LOCAL_RANK order)
    rank_of = {jid: {t[0]: i for i, t in enumerate(tasks)} for jid, tasks in placed.items()}
    node_rank = {jid: {n: i for i, n in enumerate(dict.fromkeys(t[1] for t in tasks))} for jid, tasks in placed.items()}
    local_of: dict[tuple, list] = defaultdict(list)
    for jid, tasks in placed.items():
        for t in tasks:
            local_of[(jid, t[1])].append(t[0])
    gpus: dict[int, list[tuple[int, str]]] = defaultdict(list)
    shares: dict[int, tuple[int, int]] = {}  # task -> (thousandths, memory MiB) of its one shared GPU
    share_of: dict[int, dict] = {}  # task -> the share fields of its one shared GPU's entry
    for tid, index, uuid, milli, memory, mig, total in (
            Allocation.objects.filter(task_id__in=[r["id"] for r in rows], released_at__isnull=True)
            .order_by("gpu__index", "mig_instance__uuid")
            .values_list("task_id", "gpu__index", "gpu__uuid", "gpu_milli", "gpu_memory_mib", "mig_instance__uuid",
                         "gpu__memory_mib")):
        gpus[tid].append((index, mig or uuid))
        if milli:
            shares[tid] = (milli, memory)
            share_of[tid] = {"share_milli": milli, "share_memory_mib": memory, "memory_mib": total}
    tasks_of: dict[int, list] = {n.pk: [] for n in nodes}
    for r in rows:
        if r["id"] not in rank_of.get(r["job_id"], {}) or r["node_id"] not in node_rank[r["job_id"]]:
            continue  # its gang was requeued between the two reads (a failure report): not this node's any more
        ranks = placed[r["job_id"]]
        rank = rank_of[r["job_id"]][r["id"]]
        local = local_of[(r["job_id"], r["node_id"])]
        if r["id"] not in local:
            continue  # moved to another node between the two reads: that node's answer lists it
        devices = ",".join(uuid or str(index) for index, uuid in gpus[r["id"]])
        attempt = r["job__attempts"]
        env = {**(r["role__env"] or {}),
               "CUDA_VISIBLE_DEVICES": devices, "NVIDIA_VISIBLE_DEVICES": devices or "void",
               "MASTER_ADDR": ranks[0][2], "MASTER_PORT": str(master_port(r["job_id"], attempt)),
               "WORLD_SIZE": str(len(ranks)), "RANK": str(rank), "NODE_RANK": str(node_rank[r["job_id"]][r["node_id"]]),
               "LOCAL_RANK": str(local.index(r["id"])), "LOCAL_WORLD_SIZE": str(len(local)),
               "GPUPLATFORM_JOB_ID": str(r["job_id"]), "GPUPLATFORM_ROLE": r["role__name"],
               "GPUPLATFORM_TASK_INDEX": str(r["index"]), "GPUPLATFORM_QUEUE": r["job__queue__name"],
               "GPUPLATFORM_ATTEMPT": str(attempt)}
        if r["id"] in shares:
            milli, memory = shares[r["id"]]
            env.update({"GPUPLATFORM_GPU_FRACTION": f"{milli / 1000:g}",
                        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, milli // 10))})
            if memory:
                env.update({"GPUPLATFORM_GPU_MEMORY_MIB": str(memory), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory}M"})
        if r["state"] == Task.State.RELEASING:
            action, deadline = "stop", r["release_deadline"] or now
            planned = r["release_for"] is not None
        elif r["job__state"] == Job.State.PREEMPTING:
            action, deadline = "stop", r["job__preempt_deadline"] or now
            planned = r["job__evicted_for"] is not None and r["job__stop_target"] in REQUEUE_STOPS
        else:
            action, deadline, planned = "run", None, False
        if planned and now < signal_at(deadline):
            # an eviction for a beneficiary is a plan until its last AGENT_STOP_GRACE_SECONDS: it may still be
            # withdrawn (scheduling.evict.apply_withdrawals), so the processes run on untouched until then
            action = "run"
        tasks_of[r["node_id"]].append({"task": r["id"], "attempt": attempt, "job": r["job_id"], "job_name": r["job__name"],
                      "role": r["role__name"], "index": r["index"], "action": action, "state": r["state"],
                      "stop_deadline": _iso(deadline),
                      "argv": list(r["role__command"] or []), "env": env, "working_dir": r["role__working_dir"],
                      "image": r["role__image"], "gpus": [{"index": i, "uuid": u, **share_of.get(r["id"], {})} for i, u in gpus[r["id"]]]})
    head = {"server_time": now.isoformat(), "poll_seconds": float(getattr(settings, "AGENT_POLL_SECONDS", 2.0)),
            "stop_grace_seconds": float(getattr(settings, "AGENT_STOP_GRACE_SECONDS", 30.0))}
    return {node_id: {**head, "tasks": tasks} for node_id, tasks in tasks_of.items()}
