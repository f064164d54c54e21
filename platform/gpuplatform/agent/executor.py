"""Local task executor of the node agent: start, watch, stop and report task processes (docs/execution.md).

Standard library only, Linux only (/proc). No Django imports.

Each task attempt gets a state directory `work_dir/tasks/<task>-<attempt>/` holding

    meta.json        the executor's record (below), written atomically on every change
    output.log       the task's combined stdout + stderr (appended by the supervisor)
    exit.json        {"exit_code": n} or {"signal": s}, written by the supervisor when the task ended; with
                     "agent_gone": pid when it stopped the task because the agent it watched exited (--watch), and
                     "ended_at": when the task's last process ended (epoch s; supervisors before it: absent)
    supervisor.json  {"pid", "start_time", "boot_id"} written by the supervisor as it starts
    supervisor.log   the supervisor's own stderr (empty unless it crashed)

meta.json: {"task", "attempt", "job", "role", "index", "gpus": [{"index", "uuid"} + for a fraction of a shared GPU
"share_milli", "share_memory_mib", "memory_mib"], "image", "container",
"pid" (the supervisor, leader of its own process group and session; null until started), "start_time"
(the supervisor's start time in clock ticks since boot, from /proc/<pid>/stat: guards against pid reuse),
"boot_id", "started_at" (epoch s), "ended_at" (epoch s: when the task ended, exit.json's "ended_at", else when
this executor found it ended; reported as the end's "time"), "started_reported", "result" (null while running,
else {"exit_code": n}, {"signal": s} or {"lost": message}, the last with "cause": AGENT_EXITED for a task stopped because its watched agent
exited), "exited_reported", "log_offset" (bytes of output.log shipped),
"stop" (null, or {"deadline": time.monotonic() value, "boot_id", "requested_at" (epoch s), "killed",
"container_killed"}), "refused" (absent, or the control plane's reason for refusing the attempt's "started" report:
its processes are stopped and neither its end nor its output is reported, see refuse()), "done"}. A meta.json that
exists means the attempt was started: it is never started again, across agent restarts.

Every task runs under `supervise.py` (a separate standard-library script, see there), which leads its own
process group, is the subreaper of everything the task forks, and records the exit status in exit.json.

Keys are `(task, attempt)` tuples of ints.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["ProcessExecutor", "ExecutorError", "task_env", "container_argv", "container_name", "ProcStat",
           "proc_stat", "scan_proc", "descendants", "SUPERVISOR", "RUNTIMES", "SECRET_NAMES", "SECRET_PREFIXES",
           "AGENT_EXITED", "agent_gone_message", "agent_exited_stop_message", "decode_output",
           "trim_utf8_tail"]

log = logging.getLogger("gpuplatform.agent.executor")

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervise.py")
RUNTIMES = ("docker", "podman")
# make's own variables carry the command line's assignments (MAKEFLAGS / MAKEOVERRIDES hold
# `DEMO_ARGS=--password ...` of `make demo-local DEMO_ARGS=...`), and DEMO_* are the demos' settings: an agent
# started from make, a CI job or a demo hands none of them to a task (new-user trial 19, F14).
SECRET_NAMES = frozenset({"DATABASE_URL", "REDIS_URL", "SECRET_KEY",
                          "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "MAKE_TERMOUT", "MAKE_TERMERR"})
SECRET_PREFIXES = ("DJANGO_", "GPUCTL_", "GPUPLATFORM_AGENT_", "DEMO_")
LOST_ON_RESTART = "agent restarted; process gone, no exit status"
# The cause of a "lost" report whose task was stopped because its node agent exited (supervise.py --watch); the
# server requeues the gang as a platform fault (docs/execution.md). The report's "cause" field.
AGENT_EXITED = "agent_exited"

Key = tuple  # (task: int, attempt: int)


class ExecutorError(RuntimeError):
    """A bad argument to the executor (unknown runtime, malformed assignment)."""


# --------------------------------------------------------------------------------------------- /proc helpers
@dataclass(frozen=True)
class ProcStat:
    """One process from /proc/<pid>/stat. start_time: clock ticks since boot; utime / stime: CPU clock ticks."""
    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start_time: int
    utime: int = 0
    stime: int = 0

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X", "x")


def proc_stat(pid: int) -> ProcStat | None:
    """The /proc/<pid>/stat record of `pid`, or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    try:
        return ProcStat(pid, rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]),
                        int(rest[11]), int(rest[12]))
    except (IndexError, ValueError):
        return None


class ProcTable(dict):
    """{pid: ProcStat} of one /proc scan, with its parent -> children map built once (`children()`), for every task
    the poll looks at (descendants() rebuilt it per task and per call)."""

    _children: dict[int, list[int]] | None = None

    def children(self) -> dict[int, list[int]]:
        if self._children is None:
            self._children = _children_of(self)
        return self._children


def _children_of(procs: dict[int, ProcStat]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for st in procs.values():
        if not st.dead:
            children.setdefault(st.ppid, []).append(st.pid)
    return children


def scan_proc() -> ProcTable:
    """Every process visible in /proc: {pid: ProcStat} (a ProcTable)."""
    out = ProcTable()
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def descendants(root: int, procs: dict[int, ProcStat]) -> list[int]:
    """Pids of every live descendant of `root` in `procs` (scan_proc()), by the ppid chains."""
    children = procs.children() if isinstance(procs, ProcTable) else _children_of(procs)
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


MAX_SEEN = 10000  # processes remembered per task (ProcessExecutor._seen)
TASK_MARK = "GPUPLATFORM_TASK_MARK"  # in every task process's environment: the task attempt's state directory


def marked_pids(mark: str, procs: dict[int, ProcStat]) -> list[int]:
    """Pids of the live processes in `procs` whose environment holds TASK_MARK=`mark` (inherited from the task's
    supervisor): the task's processes wherever they went, a setsid daemon re-parented to init after its supervisor
    was killed included (new-user trial 19, F9). A process whose environment this user cannot read is skipped, and
    so is one that cleared its environment (only a cgroup would hold that one)."""
    needle = f"\0{TASK_MARK}={mark}\0".encode()
    out = []
    for pid, st in procs.items():
        if st.dead:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in b"\0" + env:
            out.append(pid)
    return out


def _sig_name(sig: int) -> str:
    """'SIGKILL' for 9; 'unknown' for a number that names no signal."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "unknown"


def agent_gone_message(pid: int, exit_code: int | None, sig: int | None) -> str:
    """The "lost" message of a task its supervisor stopped because the node agent `pid` it watched exited (supervise.py
    --watch, exit.json "agent_gone"), naming how the task then ended (`exit_code` or `sig`)."""
    how = (f"signal {sig} ({_sig_name(sig)})" if sig is not None else
           f"exit code {exit_code & 0xFF}" if exit_code is not None else "no exit status")
    return (f"the node agent (pid {pid}) exited while the task ran; its supervisor stopped the task (the agent runs "
            f"with --stop-tasks-on-exit): it ended with {how}")


def agent_exited_stop_message(exit_code: int | None, sig: int | None) -> str:
    """The "lost" message of a task stopped by stop(..., cause=AGENT_EXITED): its agent had exited and what stopped
    the agents (the local demo's stop_tasks_in) stopped the task before its supervisor saw the agent gone."""
    how = (f"signal {sig} ({_sig_name(sig)})" if sig is not None else
           f"exit code {exit_code & 0xFF}" if exit_code is not None else "no exit status")
    return (f"the node agent exited while the task ran; the task was stopped with it (the demo stopping its agents and "
            f"their tasks): it ended with {how}")


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ------------------------------------------------------------------------------------ env and argv building
def task_env(overlay: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str]:
    """The task's environment: `base` (default os.environ) without the agent's secrets (SECRET_NAMES: DATABASE_URL,
    REDIS_URL, SECRET_KEY and make's MAKEFLAGS, MFLAGS, MAKEOVERRIDES, MAKELEVEL, MAKE_TERMOUT, MAKE_TERMERR;
    SECRET_PREFIXES: names starting with DJANGO_, GPUCTL_, GPUPLATFORM_AGENT_, DEMO_), overlaid with `overlay`
    (values converted with str: a variable the user's job sets itself is kept)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k not in SECRET_NAMES and not k.startswith(SECRET_PREFIXES)}
    env.update({str(k): str(v) for k, v in (overlay or {}).items()})
    return env


def container_name(task: int, attempt: int) -> str:
    """`gpuplatform-<task>-<attempt>`: the container's name, used by `runtime kill` at the deadline."""
    return f"gpuplatform-{task}-{attempt}"


def container_argv(runtime: str, *, task: int, attempt: int, image: str, argv: list[str], env_names: list[str],
                   gpus: list[dict], workdir: str = "") -> list[str]:
    """The command line that runs `argv` in `image` with `runtime` ("docker" or "podman"):

        [runtime, "run", "--rm", "--name", "gpuplatform-<task>-<attempt>", "--network", "host", GPU flags,
         "-e", NAME, ... (one per name; the value comes from the runtime's own environment, never the command
         line), "-w", workdir (only when workdir is not ""), image, *argv]

    GPU flags, from each GPU's "uuid" (its "index" when the uuid is empty): docker `--gpus "device=U1,U2"`
    (the double quotes are part of the argument: docker parses the value as CSV, so a bare comma would split
    the device list); podman (CDI) `--device nvidia.com/gpu=U` once per GPU. No GPUs: no GPU flag.
    Raises ExecutorError for another runtime or an empty image."""
    if runtime not in RUNTIMES:
        raise ExecutorError(f"unknown container runtime {runtime!r} (expected one of {', '.join(RUNTIMES)})")
    if not image:
        raise ExecutorError("container_argv needs an image")
    cmd = [runtime, "run", "--rm", "--name", container_name(task, attempt), "--network", "host"]
    ids = [str(g.get("uuid") or g.get("index")) for g in gpus]
    if ids and runtime == "docker":
        cmd += ["--gpus", f'"device={",".join(ids)}"']
    elif ids:
        for gid in ids:
            cmd += ["--device", f"nvidia.com/gpu={gid}"]
    for name in env_names:
        cmd += ["-e", name]
    if workdir:
        cmd += ["-w", workdir]
    return cmd + [image, *argv]


def _gpu_id(g: dict) -> str:
    return str(g.get("uuid")) if g.get("uuid") else f"index:{g.get('index')}"


def _gpu_ids(gpus: list[dict]) -> set[str]:
    return {_gpu_id(g) for g in gpus or []}


def _int(value) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _share(g: dict) -> tuple[int, int, int]:
    """(thousandths, memory MiB, the GPU's memory MiB) of one GPU entry; (0, 0, 0) for a whole GPU or a MIG
    instance (a task holding it holds it alone)."""
    milli = _int(g.get("share_milli"))
    if not 0 < milli < 1000:
        return 0, 0, 0
    return milli, _int(g.get("share_memory_mib")), _int(g.get("memory_mib"))


def _shares_fit(want: dict, held: list[dict]) -> bool:
    """Whether a task asking for GPU entry `want` may run beside the live tasks' entries `held` of the same
    GPU: all of them fractions whose thousandths sum to at most 1000 and whose memory sums to at most the
    GPU's memory (where known)."""
    milli, memory, total = _share(want)
    if not milli:
        return False
    for g in held:
        m, mem, tot = _share(g)
        if not m:
            return False
        milli += m
        memory += mem
        total = total or tot
    return milli <= 1000 and (not total or memory <= total)


# each byte Python's surrogateescape gives for a byte that is not part of a valid UTF-8 character (U+DC80-U+DCFF),
# and NUL (a PostgreSQL text column holds none), becomes one "?"
_NOT_TEXT = {0: "?", **{c: "?" for c in range(0xDC80, 0xDD00)}}


def decode_output(raw: bytes) -> str:
    """A task's output bytes as the text the control plane stores (docs/execution.md, "Logs"): UTF-8, each byte that
    is not part of a valid UTF-8 character, and NUL, one "?". One byte for one: len(result.encode()) == len(raw), so
    the server's offsets and `size` count the task's own bytes (new-user trial 26, F7: U+FFFD, three bytes for one
    or two, made 14 bytes written 21 stored, and the next chunk, at the file's offset, overlapped them)."""
    return raw.decode("utf-8", errors="surrogateescape").translate(_NOT_TEXT)


def trim_utf8_tail(raw: bytes) -> bytes:
    """`raw` without a trailing incomplete UTF-8 sequence (at most 3 bytes are dropped)."""
    for back in range(1, min(4, len(raw)) + 1):
        b = raw[-back]
        if b & 0xC0 == 0x80:  # continuation byte: look further back for the lead byte
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return raw[:-back] if need > back else raw
    return raw


# ------------------------------------------------------------------------------------------------ executor
class ProcessExecutor:
    """Runs task attempts as supervised process groups (or containers) under `work_dir/tasks/`.

    work_dir: the agent's work directory (created). runtime: None/"" (no containers), "docker" or "podman"
    (ExecutorError otherwise). supervisor_grace: seconds the supervisor waits between SIGTERM and SIGKILL for
    processes left behind once the task's main process exited. python: the interpreter that runs supervise.py.
    stop_tasks_on_exit: each supervisor watches this process (supervise.py --watch) and stops its task once the
    process is gone, however it ended (the local demo's agents); by default tasks outlive an agent's restart.

    Drive it with: recover() once after construction (adopts what a previous agent left running), then
    every cycle poll(), stop(...) / start(...) per the assignments, unreported() + mark_reported(...) and
    log_chunk(...) + ack_logs(...) for the reports. Not thread-safe: call it from one thread."""

    def __init__(self, work_dir: str, runtime: str | None = None, *, supervisor_grace: float = 2.0,
                 python: str | None = None, stop_tasks_on_exit: bool = False):
        if runtime and runtime not in RUNTIMES:
            raise ExecutorError(f"unknown container runtime {runtime!r} (expected one of {', '.join(RUNTIMES)})")
        self.work_dir = os.path.abspath(os.path.expanduser(work_dir))
        self.tasks_dir = os.path.join(self.work_dir, "tasks")
        os.makedirs(self.tasks_dir, exist_ok=True)
        self.runtime = runtime or ""
        self.supervisor_grace = float(supervisor_grace)
        self.python = python or sys.executable
        self.stop_tasks_on_exit = bool(stop_tasks_on_exit)
        self._boot = _boot_id()
        self._meta: dict[Key, dict] = {}
        self._procs: dict[Key, subprocess.Popen] = {}
        # every process seen in a live task's tree at a poll: key -> {pid: start_time} (trial 19b, F1: a daemon that
        # left the session and dropped or changed its TASK_MARK, then killed its supervisor, ran on; remembered, it is
        # the task's while that pid names the same process). In memory: an agent restart keeps the marks alone.
        self._seen: dict[Key, dict[int, int]] = {}
        self._waiting: set[Key] = set()

    def lock(self) -> None:
        """Take the work directory's lock (flock on work_dir/agent.lock, held as long as this executor object
        lives, at most until its process exits) so that two agents never drive the same tasks. Idempotent.
        Raises ExecutorError when another holder has it (another agent process)."""
        import fcntl

        if getattr(self, "_lock_fh", None) is not None:
            return
        fh = open(os.path.join(self.work_dir, "agent.lock"), "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise ExecutorError(f"another agent is using {self.work_dir} (agent.lock is held)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._lock_fh = fh

    # ---------------------------------------------------------------------------------------- paths, state
    @staticmethod
    def key_of(assignment: dict) -> Key:
        """(task, attempt) of an assignment dict. Raises ExecutorError when either is missing."""
        try:
            return int(assignment["task"]), int(assignment["attempt"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ExecutorError(f"assignment without a valid task/attempt: {exc}") from None

    def task_dir(self, key: Key) -> str:
        """Absolute path of the state directory of `key`."""
        return os.path.join(self.tasks_dir, f"{int(key[0])}-{int(key[1])}")

    def _path(self, key: Key, name: str) -> str:
        return os.path.join(self.task_dir(key), name)

    def _save(self, key: Key) -> None:
        _write_json(self._path(key, "meta.json"), self._meta[key])

    def meta(self, key: Key) -> dict | None:
        """A copy of the in-memory meta.json of `key` (None when this executor does not track it)."""
        m = self._meta.get(tuple(key))
        return json.loads(json.dumps(m)) if m is not None else None

    def live_keys(self) -> list[Key]:
        """Keys of the tasks started and not yet seen ended (including adopted ones), sorted."""
        return sorted(k for k, m in self._meta.items() if m.get("pid") and m.get("result") is None)

    def known(self, key: Key) -> bool:
        """True when (task, attempt) was ever started here (its meta.json exists)."""
        key = tuple(key)
        return key in self._meta or os.path.exists(self._path(key, "meta.json"))

    def _supervisor_alive(self, m: dict, procs: dict[int, ProcStat] | None = None) -> bool:
        pid = m.get("pid")
        if not pid or m.get("boot_id") != self._boot:
            return False
        st = procs.get(pid) if procs is not None else proc_stat(pid)
        return st is not None and not st.dead and st.start_time == m.get("start_time")

    def _task_pids(self, m: dict, procs: dict[int, ProcStat]) -> tuple[bool, list[int]]:
        """(supervisor alive, other live pids of the task: descendants of the supervisor + members of its
        process group / session + every process carrying the task's TASK_MARK, marked_pids, or seen in its tree at
        an earlier poll and still the same process, `_seen`: a daemon that left the session and lost its supervisor
        too). When the supervisor's pid now names another process, its group is not ours."""
        pid = m.get("pid")
        if not pid or m.get("boot_id") != self._boot:
            return False, []
        alive = self._supervisor_alive(m, procs)
        pids = set(marked_pids(self._mark(m), procs))
        seen = self._seen.get((m["task"], m["attempt"])) or {}
        pids.update(p for p, start in seen.items()  # still the process seen (not a reused pid)
                    if (st := procs.get(p)) is not None and not st.dead and st.start_time == start)
        pids.discard(pid)  # the supervisor itself (marked too), or another process now holding its pid (unmarked)
        st = procs.get(pid)
        if st is not None and st.start_time != m.get("start_time"):
            return False, sorted(pids)  # pid reused: nothing of ours can hold that pgid / sid any more
        if alive:
            pids.update(descendants(pid, procs))
        pids |= {p.pid for p in procs.values() if not p.dead and p.pid != pid and (p.pgid == pid or p.sid == pid)}
        return alive, sorted(pids)

    def _mark(self, m: dict) -> str:
        """The TASK_MARK value of the task attempt of `m`: its state directory (unique per agent and attempt)."""
        return self.task_dir((m["task"], m["attempt"]))

    def alive_pids(self, key: Key) -> list[int]:
        """Sorted pids of the task's live processes: the supervisor (when alive), its descendants and the
        members of its process group / session. [] when the task is unknown or everything is gone."""
        m = self._meta.get(tuple(key)) or _read_json(self._path(tuple(key), "meta.json"))
        if not m:
            return []
        procs = scan_proc()
        alive, pids = self._task_pids(m, procs)
        return sorted(set(pids) | ({m["pid"]} if alive else set()))

    # ------------------------------------------------------------------------------------------------ start
    def start(self, assignment: dict) -> str:
        """Start the assignment `{"task", "attempt", "argv": [str], "env": {str: str}, "working_dir": str,
        "image": str, "gpus": [{"index", "uuid"}], "job", "role", "index"}` (the assignments answer's task; a
        fractional task's GPU entry also has "share_milli" (thousandths, 1..999), "share_memory_mib" and
        "memory_mib" (the whole GPU's memory, MiB; 0 = unknown)).

        Returns "started" (supervisor launched), "exists" (this (task, attempt) was started before: never
        twice), "waiting" (one of its GPUs is held by a local task still alive, typically being stopped, and
        the two cannot share it (see _holder): call again later) or "ended" (it ended at once without a process: an image but no runtime -> exit
        code 125, an empty argv -> 127, a supervisor that could not be launched -> lost; poll() will not
        list it, unreported() reports it). Raises ExecutorError for an assignment without task/attempt."""
        key = self.key_of(assignment)
        if self.known(key):
            return "exists"
        gpus = []
        for g in assignment.get("gpus") or []:
            entry = {"index": g.get("index"), "uuid": g.get("uuid") or ""}
            milli, memory, total = _share(g)
            if milli:
                entry.update(share_milli=milli, share_memory_mib=memory, memory_mib=total)
            gpus.append(entry)
        other = self._holder(gpus)
        if other is not None:
            if key not in self._waiting:
                self._waiting.add(key)
                log.log(logging.INFO if self._meta[other].get("stop") else logging.WARNING,
                        "task %s-%s waits for GPUs held by task %s-%s", *key, *other)
            return "waiting"
        self._waiting.discard(key)
        tdir = self.task_dir(key)
        os.makedirs(tdir, exist_ok=True)
        image = str(assignment.get("image") or "")
        env_overlay = {str(k): str(v) for k, v in (assignment.get("env") or {}).items()}
        wd = str(assignment.get("working_dir") or "")
        cwd = os.path.join(self.work_dir, wd) if wd else tdir  # join keeps an absolute wd as is
        m = {"task": key[0], "attempt": key[1], "job": assignment.get("job"), "role": assignment.get("role"),
             "index": assignment.get("index"), "gpus": gpus, "image": image, "container": None,
             "runtime": self.runtime if image else "", "pid": None, "start_time": None, "boot_id": self._boot,
             "started_at": None, "started_reported": False, "result": None, "exited_reported": False,
             "log_offset": 0, "stop": None, "done": False}
        self._meta[key] = m
        self._save(key)  # before anything runs: a crash from here on can never lead to a second start
        argv = assignment.get("argv") or []
        if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
            argv = []
        if not argv:
            return self._end_now(key, 127, "the task has no command (empty argv)")
        if image:
            if not self.runtime:
                return self._end_now(key, 125, f"the task needs image {image!r} but this agent has no container "
                                               "runtime (start it with --runtime docker or --runtime podman)")
            m["container"] = container_name(*key)
            argv = container_argv(self.runtime, task=key[0], attempt=key[1], image=image, argv=list(argv),
                                  env_names=list(env_overlay), gpus=gpus, workdir=cwd if wd else "")
            cwd = tdir  # the runtime's CLI itself runs in the task directory
        cmd = [self.python, "-I", SUPERVISOR, "--dir", tdir, "--cwd", cwd, "--grace", str(self.supervisor_grace),
               "--", *argv]
        if self.stop_tasks_on_exit:
            me = proc_stat(os.getpid())
            cmd[cmd.index("--"):cmd.index("--")] = ["--watch", f"{os.getpid()}:{me.start_time if me else ''}"]
        try:
            with open(os.path.join(tdir, "supervisor.log"), "ab") as sup_log:
                proc = subprocess.Popen(cmd, cwd=tdir, env={**task_env(env_overlay), TASK_MARK: self._mark(m)},
                                        stdin=subprocess.DEVNULL,
                                        stdout=sup_log, stderr=subprocess.STDOUT, start_new_session=True,
                                        close_fds=True)
        except OSError as exc:
            m["result"] = {"lost": f"cannot launch the task supervisor: {exc}"}
            self._save(key)
            return "ended"
        st = proc_stat(proc.pid)  # our unreaped child: /proc/<pid> exists even if it exited already
        m.update(pid=proc.pid, start_time=st.start_time if st else None, started_at=time.time())
        self._procs[key] = proc
        self._save(key)
        log.info("started task %s-%s (supervisor pid %d): %s", *key, proc.pid, " ".join(argv)[:200])
        return "started"

    def _holder(self, gpus: list[dict]) -> Key | None:
        """The first live task (a leftover of an earlier attempt included) that keeps a task asking for `gpus`
        from starting, or None. Tasks holding fractions of one GPU (entries with share_milli) run together on
        it while their thousandths sum to at most 1000 and their memory to at most the GPU's; a whole GPU or
        a MIG instance is held by one task alone."""
        live = self.live_keys()
        for g in gpus:
            gid = _gpu_id(g)
            held = [(other, h) for other in live for h in self._meta[other].get("gpus") or [] if _gpu_id(h) == gid]
            if held and not _shares_fit(g, [h for _, h in held]):
                return held[0][0]
        return None

    def _end_now(self, key: Key, code: int, why: str) -> str:
        with open(self._path(key, "output.log"), "ab") as fh:
            fh.write(f"[gpuplatform] {why}\n".encode())
        now = time.time()
        _write_json(self._path(key, "exit.json"), {"exit_code": code, "ended_at": now})
        self._meta[key].update(result={"exit_code": code}, ended_at=now)
        self._save(key)
        log.warning("task %s-%s ended at once (exit code %d): %s", *key, code, why)
        return "ended"

    # ------------------------------------------------------------------------------------------------- stop
    def refuse(self, key: Key, deadline_monotonic: float, why: str) -> bool:
        """The control plane refused the "started" report of `key` (`why`: its reason, e.g. "task is running, not
        bound": it counts another start of this attempt as the task, or the attempt is over): these processes are not
        the task's. They are stopped as stop() does (SIGTERM now, SIGKILL at `deadline_monotonic`), and neither their
        end nor their output is reported (either would be taken for the task's: new-user trial 21, F4). The record
        stays (the attempt is never started again) until the processes have ended. Returns stop()'s answer (False:
        nothing runs here any more). Unknown keys: False."""
        key = tuple(key)
        m = self._meta.get(key)
        if m is None:
            return False
        m["refused"] = str(why or "refused")[:300]
        m["exited_reported"] = True  # its end is not the task's: never reported
        self._save(key)
        log.warning("task %s-%s: the control plane refused its start (%s): its processes are stopped and their end "
                    "is not reported", *key, m["refused"])
        stopping = self.stop(key, deadline_monotonic)
        self._maybe_done(key)
        return stopping

    def stop(self, key: Key, deadline_monotonic: float, *, cause: str | None = None) -> bool:
        """Stop the task: SIGTERM now to its process group and to every descendant of its supervisor, SIGKILL
        to all of them once time.monotonic() >= deadline_monotonic (enforced here and by poll(); for a
        container also `<runtime> kill <name>`). Idempotent: a second call only moves the deadline earlier.
        cause=AGENT_EXITED: the task is stopped because its agent exited (local.stop_tasks_in, after the demo stopped
        the agents): saved in meta.json's "stop" before the SIGTERM, so however the task then ends it is reported lost
        with that cause, as when its supervisor saw the agent gone first (trial 22: a SIGTERMed demo's job failed on
        one task's "exit code 143" while the other was lost, agent_exited). Returns False when the task is not running
        here (unknown, not started or already ended)."""
        key = tuple(key)
        m = self._meta.get(key)
        if m is None or not m.get("pid") or m.get("result") is not None:
            return False
        st = m.get("stop")
        if st is None or st.get("boot_id") != self._boot:
            m["stop"] = {"deadline": float(deadline_monotonic), "boot_id": self._boot, "requested_at": time.time(),
                         "killed": False, "container_killed": False, **({"cause": cause} if cause else {})}
            self._save(key)
            self._stop_file(key, deadline_monotonic)  # before the SIGTERM: the supervisor reads it (supervise.py, 5)
            self._signal(key, signal.SIGTERM)
            log.info("stopping task %s-%s: SIGTERM, SIGKILL in %.1f s", *key, deadline_monotonic - time.monotonic())
        else:
            if cause and not st.get("cause"):
                st["cause"] = cause
                self._save(key)
            if deadline_monotonic < st["deadline"]:
                st["deadline"] = float(deadline_monotonic)
                self._save(key)
                self._stop_file(key, deadline_monotonic)
        self._enforce(key, time.monotonic())
        return True

    def _stop_file(self, key: Key, deadline_monotonic: float) -> None:
        """Tell the task's supervisor the stop's deadline (supervise.STOP_FILE, unix seconds): what outlives the
        task's main process keeps the stop's grace rather than the supervisor's own."""
        try:
            _write_json(self._path(key, "stop.json"), {"deadline": time.time() + deadline_monotonic - time.monotonic()})
        except OSError as exc:  # the stop goes on: the supervisor then gives what is left its own grace
            log.warning("task %s-%s: cannot write stop.json: %s", key[0], key[1], exc)

    def stopping(self, key: Key) -> bool:
        """True while a stop was requested for a task that has not ended yet."""
        m = self._meta.get(tuple(key))
        return bool(m and m.get("stop") and m.get("result") is None)

    def next_deadline(self) -> float | None:
        """The earliest SIGKILL deadline (time.monotonic() scale) not yet enforced, or None."""
        ds = [m["stop"]["deadline"] for m in self._meta.values()
              if m.get("stop") and m.get("result") is None and not m["stop"].get("killed")]
        return min(ds) if ds else None

    def _signal(self, key: Key, sig: int) -> None:
        m = self._meta[key]
        if sig != signal.SIGKILL:
            # one signal per process (new-user trial 19, F3: the group's members got SIGTERM from killpg and again
            # one by one, 10 ms apart, entering a checkpointing handler twice): the group at once, then each
            # process of the task outside it (a descendant that left with setsid / setpgid)
            procs = scan_proc()
            alive, pids = self._task_pids(m, procs)
            group = None
            if alive:
                try:
                    os.killpg(m["pid"], sig)
                    group = m["pid"]
                except OSError:
                    pass
            for pid in pids:
                st = procs.get(pid)
                if group is None or st is None or st.pgid != group:
                    _kill(pid, sig)
            return
        # SIGKILL: the descendants first, while the supervisor (their subreaper) is alive to re-parent the
        # orphans of a killed process, until none is left; then the supervisor and its group.
        alive = False
        for _ in range(50):
            alive, pids = self._task_pids(m, scan_proc())
            if not pids:
                break
            for pid in pids:
                _kill(pid, signal.SIGKILL)
        if alive:
            try:
                os.killpg(m["pid"], signal.SIGKILL)
            except OSError:
                pass
            _kill(m["pid"], signal.SIGKILL)

    def _enforce(self, key: Key, now: float) -> None:
        m = self._meta[key]
        st = m.get("stop")
        if not st or now < st["deadline"] or m.get("result") is not None:
            return
        if not st.get("killed"):
            log.info("task %s-%s: stop deadline passed, SIGKILL", *key)
        self._signal(key, signal.SIGKILL)
        if m.get("container") and not st.get("container_killed"):
            try:
                subprocess.run([m.get("runtime") or self.runtime, "kill", m["container"]], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("task %s-%s: %s kill %s failed: %s", *key, m.get("runtime"), m["container"], exc)
            st["container_killed"] = True
        if not st.get("killed"):
            st["killed"] = True
            self._save(key)

    # ------------------------------------------------------------------------------------------------- poll
    def poll(self) -> list[dict]:
        """Enforce due SIGKILL deadlines and collect the tasks that ended since the last call.

        Returns [{"task", "attempt", "exit_code": int | None, "signal": int | None, "lost": str | None,
        "cause": str | None}], each task once. The result comes from exit.json (written by the supervisor; one
        with "agent_gone", the task stopped because the agent it watched exited, is "lost" with cause
        AGENT_EXITED, whatever its exit: the platform's fault, not the task's end); a supervisor that died
        without writing it -> the signal it died of (9 when the executor SIGKILLed it), or "lost" with a
        message when the cause is unknown. Processes left in the task's group are SIGKILLed."""
        now = time.monotonic()
        ended = []
        live = self.live_keys()
        procs = scan_proc() if live else {}
        for key in live:
            self._remember(key, procs)
        for key in live:
            m = self._meta[key]
            self._enforce(key, now)
            proc = self._procs.get(key)
            if proc is not None:
                rc = proc.poll()
                if rc is None:
                    continue
                del self._procs[key]
            elif self._supervisor_alive(m):
                continue
            else:
                rc = None
            m["result"] = self._result_of(key, rc)
            m["ended_at"] = self._end_time(key)
            self._save(key)
            self._signal(key, signal.SIGKILL)  # leftovers in its process group / session, if any
            self._seen.pop(key, None)
            log.info("task %s-%s ended: %s", *key, m["result"])
            if m.get("refused"):
                self._maybe_done(key)  # a refused start's end is not the task's: not listed, not reported
                continue
            ended.append(self._ended_record(key))
        return ended

    def _remember(self, key: Key, procs: dict[int, ProcStat]) -> None:
        """Add the processes now in the tree of the task's live supervisor (descendants, process group, session:
        no environment read) to those seen for it (`_seen`, at most MAX_SEEN)."""
        m = self._meta[key]
        pid = m.get("pid")
        if not pid or not self._supervisor_alive(m, procs):
            return
        seen = self._seen.setdefault(key, {})
        if len(seen) >= MAX_SEEN:
            return
        for p in descendants(pid, procs):
            st = procs.get(p)
            if st is not None and len(seen) < MAX_SEEN:
                seen.setdefault(p, st.start_time)

    def _ended_record(self, key: Key) -> dict:
        r = self._meta[key]["result"]
        return {"task": key[0], "attempt": key[1], "exit_code": r.get("exit_code"), "signal": r.get("signal"),
                "lost": r.get("lost"), "cause": r.get("cause")}

    def _end_time(self, key: Key) -> float:
        """When the task ended (epoch s, this node's clock): exit.json's "ended_at" (the supervisor's, when the task's
        last process was reaped), else now (its supervisor died or is gone without one: found now, at the latest), never
        before its start nor after now."""
        now = time.time()
        data = _read_json(self._path(key, "exit.json"))
        t = data.get("ended_at") if data is not None else None
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or not 0 < t <= now:
            return now
        started = self._meta[key].get("started_at")
        if isinstance(started, (int, float)) and not isinstance(started, bool) and t < started:
            return float(started)
        return float(t)

    def _result_of(self, key: Key, rc: int | None) -> dict:
        m = self._meta[key]
        data = _read_json(self._path(key, "exit.json"))
        if data is not None:
            gone = data.get("agent_gone")
            if isinstance(gone, int) and not isinstance(gone, bool) and (
                    isinstance(data.get("signal"), int) or isinstance(data.get("exit_code"), int)):
                # its supervisor stopped it because the agent that watched it exited (supervise.py --watch): the
                # platform's fault, not the task's end (trial 21: a killed demo's tasks read as killed by SIGTERM,
                # spending a restart)
                return {"lost": agent_gone_message(gone, data.get("exit_code"), data.get("signal")),
                        "cause": AGENT_EXITED}
        if (m.get("stop") or {}).get("cause") == AGENT_EXITED:
            # stopped because its agent had exited, before its supervisor saw the agent gone: the same platform fault
            sig = data.get("signal") if data is not None and isinstance(data.get("signal"), int) else None
            code = data.get("exit_code") if data is not None and isinstance(data.get("exit_code"), int) else None
            if sig is None and code is None and rc is not None and rc < 0:
                sig = -rc
            return {"lost": agent_exited_stop_message(code, sig), "cause": AGENT_EXITED}
        if data is not None:
            if isinstance(data.get("signal"), int):
                return {"signal": data["signal"]}
            if isinstance(data.get("exit_code"), int):
                return {"exit_code": data["exit_code"] & 0xFF}
        killed = bool(m.get("stop") and m["stop"].get("killed"))
        if rc is not None and rc < 0 and not m.get("stop"):
            # the supervisor itself died of a signal nobody on the platform sent, before it recorded the task's end:
            # not the task's signal (trial 19b, F9: a task's `kill -9 $PPID` read as the task SIGKILLed, diagnosed
            # with the OOM killer's hint); what the task did is unknown
            return {"lost": f"the task supervisor was killed by signal {-rc} ({_sig_name(-rc)}) before it recorded the task's "
                            "end (not sent by the platform: a process of the task, a user's kill or the OOM killer); "
                            "the task's processes were stopped"}
        if rc is not None and rc < 0:
            return {"signal": -rc}
        if rc is None and killed:
            return {"signal": int(signal.SIGKILL)}
        if rc is not None:
            return {"lost": f"the task supervisor exited with status {rc} without an exit status "
                            f"(see {self._path(key, 'supervisor.log')})"}
        return {"lost": "the task supervisor disappeared without an exit status"}

    # ---------------------------------------------------------------------------------------------- recover
    def recover(self) -> list[dict]:
        """Load the state directories of a previous agent: adopt every supervisor still alive (same pid, same
        /proc start time, same boot), record the result of those that ended meanwhile (exit.json) and mark
        the rest lost ("agent restarted; process gone, no exit status"), killing what is left of their
        process groups. Returns the ended ones as poll() does; their reports come from unreported().
        Tasks already tracked by this executor are left alone; corrupt meta.json files are skipped."""
        ended = []
        try:
            names = sorted(os.listdir(self.tasks_dir))
        except OSError:
            return ended
        for name in names:
            m = _read_json(os.path.join(self.tasks_dir, name, "meta.json"))
            if m is None or "task" not in m or "attempt" not in m:
                continue
            key = (int(m["task"]), int(m["attempt"]))
            if key in self._meta or m.get("done"):
                continue
            self._meta[key] = m
            if m.get("result") is not None:
                self._maybe_done(key)  # ended before; its reports / logs may still be due
                continue
            if not m.get("pid"):
                sup = _read_json(self._path(key, "supervisor.json"))
                if sup and sup.get("pid"):  # the previous agent died between launching it and saving its pid
                    m.update(pid=sup["pid"], start_time=sup.get("start_time"), boot_id=sup.get("boot_id"))
            data = _read_json(self._path(key, "exit.json"))
            status = data is not None and (isinstance(data.get("signal"), int) or isinstance(data.get("exit_code"), int))
            # a supervisor that wrote exit.json (its last act) has ended, even if it has not exited yet
            if m.get("pid") and not status and self._supervisor_alive(m):
                if m.get("stop") and m["stop"].get("boot_id") != self._boot:
                    m["stop"] = None
                self._save(key)
                log.info("adopted task %s-%s (supervisor pid %d)", *key, m["pid"])
                if m.get("refused") and not m.get("stop"):  # a refused start whose stop the last agent did not make
                    self.stop(key, time.monotonic() + self.supervisor_grace)
                continue
            if status or (m.get("stop") or {}).get("cause") == AGENT_EXITED:
                m["result"] = self._result_of(key, None)
            elif m.get("stop") and m["stop"].get("killed"):
                m["result"] = {"signal": int(signal.SIGKILL)}
            else:
                m["result"] = {"lost": LOST_ON_RESTART}
            m["ended_at"] = self._end_time(key)
            self._save(key)
            if m.get("pid"):
                self._signal(key, signal.SIGKILL)
            ended.append(self._ended_record(key))
        return ended

    # -------------------------------------------------------------------------------------------- reporting
    def unreported(self) -> list[dict]:
        """Report events not yet acknowledged, in order (a task's "started" before its end), in the shape of
        the reports call's "tasks": {"task", "attempt", "event": "started", "pid"}, {..., "event": "exited",
        "exit_code": int | None, "signal": int | None} or {..., "event": "lost", "message": str} (and "cause":
        AGENT_EXITED for a task stopped because its agent exited; absent otherwise). An end carries "time": when the
        task ended (meta "ended_at", epoch seconds on this node's clock; absent when unknown): the server counts the
        task ended then, not when this report arrives."""
        out = []
        for key in sorted(self._meta):
            m = self._meta[key]
            base = {"task": key[0], "attempt": key[1]}
            if m.get("pid") and not m.get("started_reported"):
                out.append({**base, "event": "started", "pid": m["pid"]})
            r = m.get("result")
            if r is not None and not m.get("exited_reported"):
                t = m.get("ended_at")
                when = {"time": float(t)} if isinstance(t, (int, float)) and not isinstance(t, bool) else {}
                if "lost" in r:
                    cause = {"cause": r["cause"]} if r.get("cause") else {}  # sent only when known
                    out.append({**base, "event": "lost", "message": r["lost"], **cause, **when})
                else:
                    out.append({**base, "event": "exited", "exit_code": r.get("exit_code"), "signal": r.get("signal"),
                                **when})
        return out

    def mark_reported(self, key: Key, event: str) -> None:
        """Record that the server answered the `event` ("started", "exited" or "lost") of `key` (accepted or
        not: either way it is not sent again). Unknown keys are ignored."""
        key = tuple(key)
        m = self._meta.get(key)
        if m is None:
            return
        if event == "started":
            m["started_reported"] = True
        elif event in ("exited", "lost"):
            m["exited_reported"] = True
        self._save(key)
        self._maybe_done(key)

    def _log_size(self, key: Key) -> int:
        try:
            return os.path.getsize(self._path(key, "output.log"))
        except OSError:
            return 0

    def _maybe_done(self, key: Key) -> None:
        m = self._meta.get(key)
        if m is None:
            return
        if m.get("refused") and m.get("result") is not None:  # its output is not shipped either
            m["done"] = True
            self._save(key)
            del self._meta[key]
            return
        if (m.get("result") is not None and m.get("exited_reported") and (m.get("started_reported") or not m.get("pid"))
                and m.get("log_offset", 0) >= self._log_size(key)):
            m["done"] = True
            self._save(key)
            del self._meta[key]

    def pending_logs(self) -> list[Key]:
        """Keys whose output.log has bytes not yet shipped, sorted (a refused start's output is never shipped)."""
        return sorted(k for k, m in self._meta.items()
                      if not m.get("refused") and self._log_size(k) > m.get("log_offset", 0))

    def log_chunk(self, key: Key, max_bytes: int = 65536) -> tuple[int, int, str]:
        """(offset, end, text): the output.log bytes [offset, end) not shipped yet, at most `max_bytes`, as
        decode_output makes them text (a "?" for each byte that is not UTF-8, and for NUL), so len(text.encode()) ==
        end - offset. While the task runs, a trailing incomplete UTF-8 sequence is held back for the next call (it
        may be completed). (offset, offset, "") when nothing is new.
        Raises KeyError for a key this executor does not track."""
        m = self._meta[tuple(key)]
        off = int(m.get("log_offset", 0))
        try:
            with open(self._path(key, "output.log"), "rb") as fh:
                fh.seek(off)
                raw = fh.read(max_bytes)
        except OSError:
            return off, off, ""
        if raw and m.get("result") is None:
            raw = trim_utf8_tail(raw)
        elif len(raw) == max_bytes:
            raw = trim_utf8_tail(raw) or raw
        return off, off + len(raw), decode_output(raw)

    def read_logs(self, key: Key, max_bytes: int = 65536) -> tuple[int, str]:
        """(offset, text): the task's output not shipped yet (see log_chunk), starting at byte `offset` of its
        output.log. Does not advance: ack_logs(key, end) does. Raises KeyError for an untracked key."""
        off, _end, text = self.log_chunk(key, max_bytes)
        return off, text

    def ack_logs(self, key: Key, next_offset: int) -> None:
        """Set the shipped byte offset of `key`'s output.log to `next_offset` (clamped to [0, file size]).
        Unknown keys are ignored."""
        key = tuple(key)
        m = self._meta.get(key)
        if m is None:
            return
        m["log_offset"] = max(0, min(int(next_offset), self._log_size(key)))
        self._save(key)
        self._maybe_done(key)
