"""Node agents on this machine, for the local demo (`manage.py demo --local-agents N`) and the
integration tests: each is a real `manage.py gpu_agent` process talking REST to the control plane on
loopback, with its own work directory, reporting GPUs read from the recorded H200 `nvidia-smi -q -x` dump
(data/nvidia-h200-node/, copied K times per node with derived UUIDs) or, with `real_gpus`, from NVML.

No Django import: the agents are separate processes and touch no database.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LocalAgent", "RECORDED_DUMP", "agent_argv", "agent_base_env", "leftover_processes", "start_agents",
           "stop_agents", "stop_tasks_in"]

REPO = Path(__file__).resolve().parents[3]
RECORDED_DUMP = REPO / "data" / "nvidia-h200-node" / "nvidia-smi-q.xml"
# What an agent process must not inherit: it talks REST only; and make's variables and the demos' DEMO_*
# (`make demo-local DEMO_ARGS="--password ..."` puts the admin password in DEMO_ARGS, MAKEFLAGS and
# MAKEOVERRIDES), which its tasks would inherit (new-user trial 19, F14; the agent strips them too,
# executor.task_env).
_DROP = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL",
         "MAKE_TERMOUT", "MAKE_TERMERR")
_DROP_PREFIXES = ("DEMO_",)


def agent_base_env(environ=None) -> dict[str, str]:
    """The environment the local agents start from: `environ` (default os.environ) without _DROP and DEMO_*."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in _DROP and not k.startswith(_DROP_PREFIXES)}


@dataclass
class LocalAgent:
    name: str
    work_dir: Path
    log_path: Path
    process: subprocess.Popen
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.process.poll() is None


def agent_argv(api: str, name: str, *, work_dir: Path, gpus: int = 2, poll: float = 1.0,
               interval: float = 5.0, real_gpus: bool = False, address: str = "127.0.0.1",
               stop_tasks_on_exit: bool = True) -> list[str]:
    """The command line of one local agent (a `manage.py gpu_agent` process). It holds no token: the token
    goes in the agent's environment (GPUPLATFORM_AGENT_TOKEN), which other users cannot read, not in `ps`.
    stop_tasks_on_exit (default): the agent's tasks end when it does, however it ends (SIGKILL included), so
    a demo that is killed, or one of whose agents dies, leaves no task behind (new-user trial 14, F2/F3)."""
    argv = [sys.executable, str(REPO / "manage.py"), "gpu_agent", "--api", api,
            "--node-name", name, "--work-dir", str(work_dir), "--poll", str(poll), "--interval", str(interval),
            "--address", address]
    if stop_tasks_on_exit:
        argv.append("--stop-tasks-on-exit")
    if not real_gpus:
        argv += ["--nvidia-smi-xml", str(RECORDED_DUMP), "--gpus", str(gpus)]
    return argv


def start_agents(api: str, token: str, count: int, *, root: Path, gpus: int = 2, poll: float = 1.0,
                 interval: float = 5.0, prefix: str = "local", real_gpus: bool = False,
                 env: dict | None = None, keep: bool = False) -> list[LocalAgent]:
    """Start `count` agents named <prefix>-0 .. <prefix>-<count-1>, each with work dir root/<name> and its
    output in root/<name>.log. Returns at once (they register within a second or two).

    Tasks a previous local run left behind (its process was killed hard) are stopped first (their ends are
    recorded in their state directories). Without `keep` their task records go: they belong to that run's
    jobs, which the demo clears, and an agent never starts a (task, attempt) it has a record of, so a new
    database's task 1 would never start. With `keep` (the demo's --keep: the jobs stay, and the server still
    counts those tasks running) the records stay: each agent reports how its tasks ended (or adopts one
    still running) and never starts them a second time (new-user trial 21, F4: the records went, every
    kept running task was started again beside the server's record of the first start)."""
    root.mkdir(parents=True, exist_ok=True)
    dirs = [root / f"{prefix}-{i}" for i in range(count)]
    stop_tasks_in(dirs, grace=2.0)
    if not keep:
        for work in dirs:
            shutil.rmtree(work / "tasks", ignore_errors=True)
    base = agent_base_env()
    base.update(env or {})
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "platform"), base.get("PYTHONPATH", "")])
    base["GPUPLATFORM_AGENT_TOKEN"] = token  # not on the command line: `ps` shows that to every local user
    agents = []
    for i in range(count):
        name = f"{prefix}-{i}"
        work = root / name
        argv = agent_argv(api, name, work_dir=work, gpus=gpus, poll=poll, interval=interval,
                          real_gpus=real_gpus)
        log_path = root / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, cwd=REPO, env=base, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_exit_with_parent)
        agents.append(LocalAgent(name, work, log_path, proc, argv))
    return agents


def stop_agents(agents: list[LocalAgent], *, stop_tasks: bool = True, grace: float = 5.0) -> list[int]:
    """Stop the agent processes (SIGTERM, then SIGKILL after `grace`). With `stop_tasks`, every task they
    started is stopped too (SIGTERM, SIGKILL after `grace`): a real agent leaves its tasks running across
    its own restarts, a demo that ends does not. Pass every agent that was started, dead ones included: a
    dead agent's tasks are stopped through its work directory. Returns the pids still running afterwards
    (leftover_processes; [] when everything is gone), checked, not assumed."""
    for agent in agents:
        if agent.alive():
            agent.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for agent in agents:
        try:
            agent.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            agent.process.kill()
            agent.process.wait()
    if stop_tasks:
        stop_tasks_in([agent.work_dir for agent in agents], grace=grace)
    return leftover_processes(agents, tasks=stop_tasks)


def leftover_processes(agents: list[LocalAgent], *, tasks: bool = True,
                       work_dirs: list[Path] = ()) -> list[int]:
    """Sorted pids of what still runs of `agents`: the agent processes and (with `tasks`) every live process
    of every task recorded under their work directories and `work_dirs` (supervisor, descendants, members
    of its process group or session)."""
    from .executor import ProcessExecutor

    pids = {agent.process.pid for agent in agents if agent.alive()}
    dirs = [agent.work_dir for agent in agents] + list(work_dirs) if tasks else []
    for work_dir in dirs:
        tasks_dir = Path(work_dir) / "tasks"
        if not tasks_dir.is_dir():
            continue
        ex = ProcessExecutor(str(work_dir))
        for entry in tasks_dir.iterdir():
            task, _, attempt = entry.name.partition("-")
            if task.isdigit() and attempt.isdigit():
                pids.update(ex.alive_pids((int(task), int(attempt))))
    return sorted(pids)


def stop_tasks_in(work_dirs: list[Path], *, grace: float = 5.0) -> None:
    """Stop every task an agent started under `work_dirs` (SIGTERM, SIGKILL after `grace`) and wait until
    none is left (at most grace + 5 s). For agents that are no longer running: each task is stopped with
    cause=AGENT_EXITED, so it is reported lost (agent_exited, the platform's fault) whether its supervisor or this
    stop came first (trial 22: a SIGTERMed demo's task recorded "exit code 143", failing its job)."""
    from .executor import AGENT_EXITED, ProcessExecutor

    executors = []
    for work_dir in work_dirs:
        if Path(work_dir).exists():
            ex = ProcessExecutor(str(work_dir))
            ex.recover()
            for key in ex.live_keys():
                ex.stop(key, time.monotonic() + grace, cause=AGENT_EXITED)
            executors.append(ex)
    end = time.monotonic() + grace + 5
    while time.monotonic() < end and any(ex.live_keys() for ex in executors):
        for ex in executors:
            ex.poll()
        time.sleep(0.1)


def _exit_with_parent() -> None:
    """In the agent's child process before exec: SIGTERM it when the process that started it dies (a local
    demo killed with SIGKILL must not leave its agents serving the next run)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
