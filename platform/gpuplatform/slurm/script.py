"""One gang -> one Slurm batch job (docs/slurm.md). Pure: no Django, no I/O.

`build_job(gang, ...)` -> SlurmScripts(batch, launch): `batch` is what `sbatch` reads on stdin, `launch` is the
per-task launcher the step runs (written to the job's output directory, a path shared by the platform and
the nodes). One Slurm task is one platform task:

- placement mode: `--nodelist` = exactly the gang's nodes, `-N` their number, `--ntasks-per-node` = tasks per
  node, `--gres=gpu:<tasks per node x GPUs per task>`; the launcher finds its platform task by
  (SLURMD_NODENAME, SLURM_LOCALID), so every task runs on the node the cycle chose for it.
- admission mode: `-N` and `--ntasks-per-node` only (Slurm chooses the nodes); the launcher finds its task by
  SLURM_PROCID (the platform's rank order), and the backend records where Slurm put it.

Each task gets the platform's environment (the role's variables, GPUPLATFORM_*), then torchrun's rendezvous
variables from the Slurm step: RANK = SLURM_PROCID, NODE_RANK = SLURM_NODEID, LOCAL_RANK = SLURM_LOCALID,
WORLD_SIZE = SLURM_NTASKS, LOCAL_WORLD_SIZE = tasks per node, MASTER_ADDR = the address of the step's first
node, MASTER_PORT = the platform's port for (job, attempt). CUDA_VISIBLE_DEVICES is the task's slice of
the GPUs Slurm gave the step on its node (Slurm picks the indices, honouring gres.conf's affinity).

Files in the output directory D (per attempt): `task-<task id>.out` (combined stdout/stderr),
`task-<task id>.started` (the launcher's pid, written before the command starts), `task-<task id>.exit`
("exit <code>" or "signal <number>", written when the command ends), `batch.out` (Slurm's own output).

`--time` is the time limit plus the stop grace, rounded up to whole minutes: the platform stops the job at
its limit; Slurm's limit is the backstop that ends it if the platform cannot.

Gangs whose nodes hold different numbers of tasks, or whose roles want different GPUs per task, would need
a heterogeneous job; build_job raises ShapeError for them (not implemented, docs/slurm.md).
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

__all__ = ["GangTask", "SlurmScripts", "ShapeError", "build_job", "job_name", "parse_job_name", "TORCH_VARS"]

TORCH_VARS = ("RANK", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


class ShapeError(ValueError):
    """The gang cannot be one homogeneous Slurm job (the message says why)."""


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
class SlurmScripts:
    batch: str
    launch: str
    nodes: list
    tasks_per_node: int
    gpus_per_task: int


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


def build_job(tasks: list[GangTask], *, job_id: int, attempt: int, output_dir: str, partition: str,
              master_port: int, time_limit_seconds: int | None, grace_seconds: float,
              addresses: dict[str, str] | None = None, mode: str = "placement") -> SlurmScripts:
    """The batch script and launcher for one gang (`tasks` in the platform's rank order). Raises ShapeError
    for an empty or heterogeneous gang and ValueError for an unknown mode."""
    if mode not in ("placement", "admission"):
        raise ValueError(f"mode must be placement or admission, not {mode!r}")
    if not tasks:
        raise ShapeError("the gang has no task")
    nodes = list(dict.fromkeys(t.node for t in tasks))
    per_node = {n: [t for t in tasks if t.node == n] for n in nodes}
    counts = {len(v) for v in per_node.values()}
    if len(counts) != 1:
        raise ShapeError("its nodes hold different numbers of tasks "
                         f"({', '.join(f'{n}: {len(v)}' for n, v in per_node.items())}): that needs a heterogeneous "
                         "Slurm job, which this backend does not build")
    gpu_counts = {t.gpus for t in tasks}
    if len(gpu_counts) != 1:
        raise ShapeError(f"its tasks want different GPU counts ({sorted(gpu_counts)}): that needs a heterogeneous "
                         "Slurm job, which this backend does not build")
    k, g = counts.pop(), gpu_counts.pop()
    d = output_dir.rstrip("/")
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={job_name(job_id, attempt)}",
             f"#SBATCH --partition={partition}",
             f"#SBATCH --nodes={len(nodes)}",
             f"#SBATCH --ntasks-per-node={k}",
             f"#SBATCH --output={d}/batch.out",
             f"#SBATCH --chdir={d}",
             f"#SBATCH --comment=gpuplatform-job-{job_id}-attempt-{attempt}",
             "#SBATCH --no-requeue",
             "#SBATCH --kill-on-invalid-dep=yes"]
    if mode == "placement":
        lines.append(f"#SBATCH --nodelist={','.join(nodes)}")
    if g:
        lines.append(f"#SBATCH --gres=gpu:{k * g}")
    if time_limit_seconds:
        lines.append(f"#SBATCH --time={max(1, math.ceil((time_limit_seconds + grace_seconds) / 60))}")
    # the step: one launcher per task; a failing task does not kill the others (the platform stops the gang)
    lines += ["", f"exec srun --kill-on-bad-exit=0 --ntasks={len(tasks)} --ntasks-per-node={k} "
                  f"--output={d}/step-%t.out /bin/bash {d}/launch.sh", ""]
    launch = ["#!/bin/bash",
              f"# gpuplatform job {job_id} attempt {attempt} ({mode} mode): Slurm task -> platform task",
              f"D={_q(d)}",
              'key="$SLURMD_NODENAME/$SLURM_LOCALID"' if mode == "placement" else 'key="$SLURM_PROCID"',
              'case "$key" in']
    for rank, t in enumerate(tasks):
        local = per_node[t.node].index(t)
        key = f"{t.node}/{local}" if mode == "placement" else str(rank)
        env = {name: value for name, value in t.env.items() if name not in TORCH_VARS}
        exports = " ".join(f"{name}={_q(value)}" for name, value in sorted(env.items()))
        wd = t.working_dir or d
        launch.append(f"  {_q(key)}) T={t.task}; WD={_q(wd)}; export {exports}; set -- {shlex.join(t.argv)} ;;"
                      if exports else f"  {_q(key)}) T={t.task}; WD={_q(wd)}; set -- {shlex.join(t.argv)} ;;")
    addr = addresses or {}
    launch += ['  *) echo "gpuplatform: no platform task for $key" >&2; exit 97 ;;', "esac",
               "declare -A ADDR=(" + " ".join(f"[{_q(n)}]={_q(a)}" for n, a in sorted(addr.items()) if a) + ")",
               'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)',
               'first=${first:-$SLURMD_NODENAME}',
               'export MASTER_ADDR="${ADDR[$first]:-$first}"',
               f"export MASTER_PORT={master_port}",
               'export RANK="$SLURM_PROCID" NODE_RANK="$SLURM_NODEID" LOCAL_RANK="$SLURM_LOCALID" '
               f'WORLD_SIZE="$SLURM_NTASKS" LOCAL_WORLD_SIZE={k}',
               # this task's slice of the GPUs Slurm gave the step on this node
               f'IFS=, read -r -a all <<< "${{CUDA_VISIBLE_DEVICES:-}}"',
               f'mine=("${{all[@]:$((SLURM_LOCALID * {g})):{g}}}")' if g else "mine=()",
               'export CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${mine[*]}")',
               'export NVIDIA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-void}"',
               'cd "$WD" 2>/dev/null || cd "$D"',
               '"$@" >>"$D/task-$T.out" 2>&1 </dev/null &',
               'child=$!',
               'echo "$child" >"$D/task-$T.started"',
               "trap 'kill -TERM $child 2>/dev/null' TERM INT",
               'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done',
               'if [ "$rc" -gt 128 ]; then echo "signal $((rc - 128))" >"$D/task-$T.exit.tmp";'
               ' else echo "exit $rc" >"$D/task-$T.exit.tmp"; fi',
               'mv "$D/task-$T.exit.tmp" "$D/task-$T.exit"',
               'exit "$rc"', ""]
    return SlurmScripts(batch="\n".join(lines), launch="\n".join(launch), nodes=nodes, tasks_per_node=k,
                        gpus_per_task=g)
