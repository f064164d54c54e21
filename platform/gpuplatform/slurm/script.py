"""One gang -> one Slurm batch job (docs/slurm.md). Pure: no Django, no I/O.

`build_job(gang, ...)` -> SlurmScripts(batch, launch, ...): `batch` is what `sbatch` reads on stdin, `launch` is
the per-task launcher the step runs (written to the job's output directory, a path shared by the platform and
the nodes). One Slurm task is one platform task.

Components (`layout`): each node of the gang has a shape, (tasks on it, GPUs of those tasks); nodes of one
shape form one component, in the order of their first task's rank. A gang of one shape is one ordinary Slurm
job; a gang whose shapes differ (a 1-GPU launcher role on one node and 8-GPU workers on two others, or nodes
holding different task counts) is one Slurm heterogeneous job: one `#SBATCH hetjob`-separated component per
shape, each with its own options, and one `srun ... : ...` step launching every component (`--het-group=c`).
A node is in exactly one component (Slurm 22.05 refuses het components that share a node: "required and
excluded node lists overlap"); tasks of different roles on one node share its component, and each task
takes its own GPU count from the node's allocation.

- placement mode: per component `--nodelist` = exactly its nodes, `-N` their number, `--ntasks-per-node` =
  tasks per node, `--gres=gpu:<GPUs per node>`; the launcher finds its platform task by (component,
  SLURMD_NODENAME, SLURM_LOCALID), so every task runs on the node the cycle chose for it.
- admission mode: `-N` and `--ntasks-per-node` only (Slurm chooses the nodes); the launcher finds its task by
  (component, SLURM_PROCID), and the backend records where Slurm put it.

Each task gets the platform's environment (the role's variables, GPUPLATFORM_*), then torchrun's rendezvous
variables from the Slurm step, across the whole gang (one srun makes one step of every component, with
global ids): RANK = SLURM_PROCID, NODE_RANK = SLURM_NODEID, LOCAL_RANK = SLURM_LOCALID, WORLD_SIZE =
SLURM_NTASKS, LOCAL_WORLD_SIZE = tasks on its node, MASTER_ADDR = the address of the first node of the first
component (SLURM_JOB_NODELIST_HET_GROUP_0 in a het job, else SLURM_JOB_NODELIST; Slurm's node order, where
rank 0 runs), MASTER_PORT = the platform's port for (job, attempt). CUDA_VISIBLE_DEVICES is the task's slice
of the GPUs Slurm gave its component on its node (Slurm picks the indices, honouring gres.conf's affinity).

Files in the output directory D (per attempt): `task-<task id>.out` (combined stdout/stderr),
`task-<task id>.started` (the launcher's pid, written before the command starts), `task-<task id>.exit`
("exit <code>" or "signal <number>", written when the command ends), `batch.out` (Slurm's own output),
`step-<component>-<task>.out` (the launcher's own output).

`--time` is the time limit plus the stop grace, rounded up to whole minutes: the platform stops the job at
its limit; Slurm's limit is the backstop that ends it if the platform cannot.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

__all__ = ["GangTask", "Component", "SlurmScripts", "ShapeError", "layout", "build_job", "job_name", "parse_job_name",
           "TORCH_VARS"]

TORCH_VARS = ("RANK", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


class ShapeError(ValueError):
    """The gang cannot be a Slurm job (the message says why: an empty gang)."""


@dataclass(frozen=True)
class GangTask:
    """One platform task in rank order: its id, node name, argv, env (the platform's, from
    execution.assignments), working dir ("" = the output directory) and number of GPUs."""
    task: int
    node: str
    argv: tuple
    env: dict
    working_dir: str
    gpus: int


@dataclass(frozen=True)
class Component:
    """One Slurm job component: `nodes` (the plan's, in the order of their first rank), `tasks_per_node`,
    `gpus_per_node`, and `slots`: per task in component order (node by node, a node's tasks in rank
    order) (GangTask, node index in `nodes`, local index on its node, offset of its first GPU among the
    node's GPUs)."""
    index: int
    nodes: tuple
    tasks_per_node: int
    gpus_per_node: int
    slots: tuple

    @property
    def ntasks(self) -> int:
        return len(self.slots)


@dataclass(frozen=True)
class SlurmScripts:
    batch: str
    launch: str
    nodes: list
    tasks_per_node: int  # of the first component
    gpus_per_task: int  # of the first task
    components: tuple = ()

    @property
    def heterogeneous(self) -> bool:
        return len(self.components) > 1

    def describe(self) -> str:
        """"2 node(s) x 1 task(s), 1 GPU(s) per task" (one component), or per component its nodes, tasks and
        GPUs per node: "heterogeneous job of 2 components: a x 1 task(s) with 1 GPU(s); b,c x 1 task(s) with
        8 GPU(s)"."""
        if not self.heterogeneous:
            return (f"{len(self.nodes)} node(s) x {self.tasks_per_node} task(s), {self.gpus_per_task} GPU(s) "
                    "per task")
        return (f"heterogeneous job of {len(self.components)} components: "
                + "; ".join(f"{','.join(c.nodes)} x {c.tasks_per_node} task(s) with {c.gpus_per_node} GPU(s)"
                            for c in self.components))


def job_name(job_id: int, attempt: int) -> str:
    """The Slurm job name of a platform job's attempt: "gpp-<job id>-a<attempt>"."""
    return f"gpp-{job_id}-a{attempt}"


def parse_job_name(name: str) -> tuple[int, int] | None:
    """"gpp-12-a3" -> (12, 3); None for any other name (jobs that are not the platform's)."""
    head, _, rest = (name or "").partition("gpp-")
    if head or "-a" not in rest:
        return None
    job, _, attempt = rest.partition("-a")
    return (int(job), int(attempt)) if job.isdigit() and attempt.isdigit() else None


def _q(value) -> str:
    return shlex.quote(str(value))


def layout(tasks: list) -> list[Component]:
    """The gang's Slurm components (module docstring): nodes grouped by shape (tasks on the node, their GPUs),
    in the order of each shape's first rank. `tasks`: GangTasks (or anything with .node and .gpus) in the
    platform's rank order. Raises ShapeError for an empty gang."""
    if not tasks:
        raise ShapeError("the gang has no task")
    per_node: dict[str, list] = {}
    for t in tasks:
        per_node.setdefault(t.node, []).append(t)
    shapes: dict[tuple, list[str]] = {}
    for node, mine in per_node.items():
        shapes.setdefault((len(mine), sum(t.gpus for t in mine)), []).append(node)
    out = []
    for c, ((k, g), nodes) in enumerate(shapes.items()):
        slots = []
        for i, node in enumerate(nodes):
            offset = 0
            for local, t in enumerate(per_node[node]):
                slots.append((t, i, local, offset))
                offset += t.gpus
        out.append(Component(index=c, nodes=tuple(nodes), tasks_per_node=k, gpus_per_node=g, slots=tuple(slots)))
    return out


def build_job(tasks: list[GangTask], *, job_id: int, attempt: int, output_dir: str, partition: str,
              master_port: int, time_limit_seconds: int | None, grace_seconds: float,
              addresses: dict[str, str] | None = None, mode: str = "placement") -> SlurmScripts:
    """The batch script and launcher for one gang (`tasks` in the platform's rank order): one Slurm job, or one
    heterogeneous job when its nodes' shapes differ (module docstring). Raises ShapeError for an empty gang
    and ValueError for an unknown mode."""
    if mode not in ("placement", "admission"):
        raise ValueError(f"mode must be placement or admission, not {mode!r}")
    comps = layout(tasks)
    het = len(comps) > 1
    d = output_dir.rstrip("/")
    common = [f"#SBATCH --job-name={job_name(job_id, attempt)}",
              f"#SBATCH --partition={partition}",
              f"#SBATCH --comment=gpuplatform-job-{job_id}-attempt-{attempt}",
              "#SBATCH --no-requeue"]
    if time_limit_seconds:
        common.append(f"#SBATCH --time={max(1, math.ceil((time_limit_seconds + grace_seconds) / 60))}")
    lines = ["#!/bin/bash"]
    steps = []
    for c in comps:
        if c.index:
            lines.append("#SBATCH hetjob")  # every component repeats the options a job record needs
        lines += common
        if c.index == 0:  # the batch shell runs in the first component
            lines += [f"#SBATCH --output={d}/batch.out", f"#SBATCH --chdir={d}", "#SBATCH --kill-on-invalid-dep=yes"]
        lines += [f"#SBATCH --nodes={len(c.nodes)}", f"#SBATCH --ntasks-per-node={c.tasks_per_node}"]
        if mode == "placement":
            lines.append(f"#SBATCH --nodelist={','.join(c.nodes)}")
        if c.gpus_per_node:
            lines.append(f"#SBATCH --gres=gpu:{c.gpus_per_node}")
        group = f"--het-group={c.index} " if het else ""
        out = f"step-{c.index}-%t.out"
        # one launcher per task; a failing task does not kill the others (the platform stops the gang)
        steps.append(f"{group}--kill-on-bad-exit=0 --ntasks={c.ntasks} --ntasks-per-node={c.tasks_per_node} "
                     f"--output={d}/{out} /bin/bash {d}/launch.sh {c.index}")
    lines += ["", "exec srun " + " : ".join(steps), ""]
    launch = ["#!/bin/bash",
              f"# gpuplatform job {job_id} attempt {attempt} ({mode} mode"
              + (f", heterogeneous: {len(comps)} components" if het else "") + "): Slurm task -> platform task",
              f"D={_q(d)}",
              'C="${1:-0}"',  # the component (srun's argument)
              'key="$C/$SLURMD_NODENAME/$SLURM_LOCALID"' if mode == "placement" else 'key="$C/$SLURM_PROCID"',
              'case "$key" in']
    first_rank = 0
    for c in comps:
        for r, (t, i, local, offset) in enumerate(c.slots):
            key = f"{c.index}/{t.node}/{local}" if mode == "placement" else f"{c.index}/{first_rank + r}"
            env = {name: value for name, value in t.env.items() if name not in TORCH_VARS}
            exports = " ".join(f"{name}={_q(value)}" for name, value in sorted(env.items()))
            wd = t.working_dir or d
            head = f"  {_q(key)}) T={t.task}; WD={_q(wd)}; LWS={c.tasks_per_node}; OFF={offset}; NG={t.gpus};"
            launch.append(f"{head} export {exports}; set -- {shlex.join(t.argv)} ;;" if exports
                          else f"{head} set -- {shlex.join(t.argv)} ;;")
        first_rank += c.ntasks
    addr = addresses or {}
    launch += ['  *) echo "gpuplatform: no platform task for $key" >&2; exit 97 ;;', "esac",
               "declare -A ADDR=(" + " ".join(f"[{_q(n)}]={_q(a)}" for n, a in sorted(addr.items()) if a) + ")",
               # the first node of the first component: where Slurm's rank 0 runs
               # (the first name of Slurm's compact list: "gpn[1-2],x" -> gpn1; no scontrol call per task)
               'nl="${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}"',
               r'[[ $nl =~ ^([^],[]*)(\[([0-9]+)[^]]*\]([^,]*))? ]] && '
               'first="${BASH_REMATCH[1]}${BASH_REMATCH[3]}${BASH_REMATCH[4]}"',
               'first=${first:-$SLURMD_NODENAME}',
               'export MASTER_ADDR="${ADDR[$first]:-$first}"',
               f"export MASTER_PORT={master_port}",
               'export RANK="$SLURM_PROCID" NODE_RANK="$SLURM_NODEID" LOCAL_RANK="$SLURM_LOCALID" '
               'WORLD_SIZE="$SLURM_NTASKS" LOCAL_WORLD_SIZE="$LWS"',
               # this task's slice of the GPUs Slurm gave its component on this node
               'IFS=, read -r -a all <<< "${CUDA_VISIBLE_DEVICES:-}"',
               'if [ "$NG" -gt 0 ]; then mine=("${all[@]:$OFF:$NG}"); else mine=(); fi',
               'export CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${mine[*]}")',
               'export NVIDIA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-void}"',
               'cd "$WD" 2>/dev/null || cd "$D"',
               '"$@" >>"$D/task-$T.out" 2>&1 </dev/null &',
               'child=$!',
               'echo "$child" >"$D/task-$T.started"',
               # Slurm's signals (scancel --signal, its time limit, its cancel) reach every process of the step,
               # the command and its children included (process tracking): the launcher forwards nothing (a
               # forward was a second SIGTERM to the command in the same millisecond, re-entering its
               # checkpoint handler: trial 19, F3); it only outlives the TERM to write the command's exit
               "trap ':' TERM INT",
               'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done',
               'if [ "$rc" -gt 128 ]; then echo "signal $((rc - 128))" >"$D/task-$T.exit.tmp";'
               ' else echo "exit $rc" >"$D/task-$T.exit.tmp"; fi',
               'mv "$D/task-$T.exit.tmp" "$D/task-$T.exit"',
               'exit "$rc"', ""]
    return SlurmScripts(batch="\n".join(lines), launch="\n".join(launch),
                        nodes=[n for c in comps for n in c.nodes], tasks_per_node=comps[0].tasks_per_node,
                        gpus_per_task=tasks[0].gpus, components=tuple(comps))
