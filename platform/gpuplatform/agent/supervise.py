"""Task supervisor: one per task attempt, started by the node agent BY PATH (standard library only).

    <python> -I /abs/path/supervise.py --dir TASKDIR [--cwd DIR] [--grace SECONDS] [--watch PID:START] -- ARGV...

It must not import anything from gpuplatform (fast start, no Django or Celery). What it does, in order:

1. makes itself a child subreaper (prctl(PR_SET_CHILD_SUBREAPER=36, 1)) so that every orphaned descendant
   of the task (double forks, setsid daemons) is re-parented to it rather than to init;
2. records {"pid": n, "start_time": clock ticks since boot, "boot_id": "..."} in TASKDIR/supervisor.json
   (atomically) so an agent that crashed between starting it and writing its own state can still adopt it;
3. catches SIGTERM, SIGINT and SIGHUP with a no-op handler: the agent signals the whole process group and
   every descendant itself; a caught (not ignored) signal is reset to its default in the child by exec;
4. starts ARGV as its child: stdin /dev/null, stdout and stderr appended to TASKDIR/output.log, cwd = --cwd
   (default: its own cwd), environment = its own (the agent built it);
5. reaps every child until ARGV's process has exited, then terminates what is left of the tree: SIGTERM to
   every descendant, up to --grace seconds (default 2) of waiting, SIGKILL to the rest, reaps them all. When
   the agent is stopping the task (it wrote TASKDIR/stop.json, {"deadline": unix seconds}, before its SIGTERM),
   what is left already has that SIGTERM and keeps the stop's grace: no second SIGTERM, and the SIGKILL comes
   KILL_MARGIN seconds before the stop's deadline (new-user trial 19: `sh -c "cd d && python train.py"` lost its
   checkpoint when sh died on the SIGTERM and its python child, checkpointing, was signalled again and killed
   2 s later);
6. when ARGV's process was killed by SIGKILL (or exited 137, a shell's "child killed by SIGKILL"), looks for
   evidence of the kernel's OOM killer: the kernel log's "Killed process <its pid>" line where it may read
   /dev/kmsg (written as "[gpuplatform] kernel log: <line>"), else the oom_kill counters it can read (its
   cgroup's memory.events (v2) or memory.oom_control (v1), and the host's /proc/vmstat) read before the start
   and now: when one grew it writes "[gpuplatform] the kernel's OOM killer killed N process(es) ... while the
   task ran" into output.log. The diagnosis reads either as host_oom; without them nothing is written: a
   SIGKILL alone is no proof of an out-of-memory kill (a user's `kill -9`, a watchdog, `timeout -s KILL`);
7. writes TASKDIR/exit.json atomically, {"exit_code": n} or {"signal": s} with "ended_at": the time (epoch seconds,
   this node's clock) the task's last process ended (ARGV's process and what was left of its tree reaped: its GPUs
   free), and exits 0. The agent reports that time as the task's end (executor.unreported: "time"), however late it
   reports (its poll, a cut-off from the server, a restart that adopts the task).

With --watch PID:START (an agent started with --stop-tasks-on-exit: the local demo's agents), it also checks
every WATCH_SECONDS that the process PID, started at START clock ticks since boot (so a reused pid is not
mistaken for it), still runs; once it is gone (killed with SIGKILL, its demo killed) it writes "[gpuplatform]
the agent (pid N) is gone: stopping the task" into output.log and terminates the whole task as in step 5
(SIGTERM to every descendant, --grace seconds, SIGKILL), then goes on with 6 and 7; exit.json then also says
that it stopped the task for that reason: {"signal": 15, "agent_gone": N} (or {"exit_code": n, "agent_gone": N}:
how the task ended after this stop, N the watched agent's pid). The next agent reports such a task lost because
its agent exited, the platform's fault (executor._result_of), not the task's own end. A task that ended on its
own before the agent was seen gone has no "agent_gone"; one whose main process is reaped once the agent is already
gone (stopped by whatever stopped the agent, before the next look) has it too, unless it exited 0 unasked (no
stop.json). Polling rather than
PR_SET_PDEATHSIG: the supervisor runs in a session of its own, the death signal follows the agent's *thread*
that forked it (not the process), and a signal the supervisor set for itself could be missed if the agent died
before the prctl; a /proc read every WATCH_SECONDS has none of these gaps.

A command that cannot be started writes one line "[gpuplatform] cannot start ...: <reason>" into
output.log and exit.json {"exit_code": 127} (not found) or {"exit_code": 126} (permission denied, not
executable, any other exec error). Bad arguments exit 1 without exit.json. Linux only (/proc, prctl).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
WATCH_SECONDS = 0.25  # how often a supervisor started with --watch checks that its agent still runs
STOP_FILE = "stop.json"  # the agent's stop of the task: {"deadline": unix seconds of its SIGKILL}
KILL_MARGIN = 0.5  # seconds before a stop's deadline that the supervisor kills what is left (then writes exit.json)


def _stop_deadline(task_dir: str) -> float | None:
    """The deadline (unix seconds) of the agent's stop of this task, or None when it is not being stopped."""
    try:
        with open(os.path.join(task_dir, STOP_FILE), encoding="utf-8") as fh:
            return float(json.load(fh)["deadline"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _set_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start_time) of `pid` from /proc, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    try:
        return rest[0].decode(), int(rest[1]), int(rest[19])
    except (IndexError, ValueError):
        return None


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of `root`, found through the ppid chains in /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is None or st[0] in ("Z", "X"):
            continue
        children.setdefault(st[1], []).append(int(name))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def _reap_nohang() -> list[tuple[int, int]]:
    """Reap every child that has exited; [(pid, status)]."""
    done = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, status))


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _cleanup(grace: float, task_dir: str | None = None) -> None:
    """Terminate and reap every remaining descendant: SIGTERM, up to `grace` seconds, SIGKILL. While the agent
    stops the task (_stop_deadline of `task_dir`), they have had its SIGTERM: no second one, and they wait until
    KILL_MARGIN seconds before its deadline instead of `grace`."""
    me = os.getpid()
    left = _descendants(me)
    if left:
        deadline = _stop_deadline(task_dir) if task_dir else None
        if deadline is None:
            _signal_all(left, signal.SIGTERM)
            end = time.monotonic() + grace
        else:
            end = time.monotonic() + max(0.0, deadline - time.time() - KILL_MARGIN)
        while time.monotonic() < end:
            _reap_nohang()
            left = _descendants(me)
            if not left:
                break
            time.sleep(0.02)
    for _ in range(100):  # a killed parent re-parents its children to us: repeat until nothing is left
        left = _descendants(me)
        if not left:
            break
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.01)
        _reap_nohang()
    while True:  # reap the zombies left, blocking: SIGKILLed processes die promptly
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue


def _oom_counters() -> dict[str, int]:
    """{where: value} of every OOM-kill counter this process can read: its own cgroup's (v2 memory.events
    `oom_kill`, v1 memory.oom_control `oom_kill`) and the host's (/proc/vmstat `oom_kill`, Linux >= 4.13).
    The task's processes are in the supervisor's cgroup unless the task moved them. Missing ones are left out."""
    files = []
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                if parts[0] == "0" and parts[1] == "":
                    files.append(f"/sys/fs/cgroup{parts[2].rstrip('/')}/memory.events")
                elif "memory" in parts[1].split(","):
                    files.append(f"/sys/fs/cgroup/memory{parts[2].rstrip('/')}/memory.oom_control")
    except OSError:
        pass
    files.append("/proc/vmstat")
    found = {}
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        found[path] = int(value)
                        break
        except OSError:
            pass
    return found


KMSG_RECORDS = 100_000  # the most kernel log records read after a SIGKILL (the ring buffer holds fewer)


def _kmsg_records(path: str = "/dev/kmsg"):
    """The kernel log's records (message text), oldest first, where this process may read it (root, or
    kernel.dmesg_restrict = 0); nothing otherwise. Non-blocking: stops at the end of the buffer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        for _ in range(KMSG_RECORDS):
            try:
                raw = os.read(fd, 8192)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: go on with the next
                    continue
                return
            if not raw:
                return
            yield raw.decode("utf-8", "replace").split(";", 1)[-1].split("\n", 1)[0]
    finally:
        os.close(fd)


def _kernel_oom_line(pid: int, records) -> str | None:
    """The kernel's OOM-killer line naming `pid` ('Out of memory: Killed process <pid> (<comm>) ...', 'Memory
    cgroup out of memory: Killed process <pid> ...'), the last one, or None."""
    found = None
    needle = f"Killed process {pid} ("
    for text in records:
        if needle in text and "out of memory" in text.lower():
            found = text
    return found


def _oom_line(before: dict[str, int], after: dict[str, int]) -> str | None:
    """The log line naming the OOM kills counted between `before` and `after` (the task's run), or None."""
    for path in sorted(after, key=lambda p: p == "/proc/vmstat"):  # the cgroup's (the task's own) first
        if path in before and after[path] > before[path]:
            n = after[path] - before[path]
            where = "on this host" if path == "/proc/vmstat" else "in the task's cgroup"
            return (f"the kernel's OOM killer killed {n} process{'es' if n != 1 else ''} {where} while the task ran "
                    f"({path} oom_kill {before[path]} -> {after[path]})")
    return None


def _status_result(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"exit_code": os.WEXITSTATUS(status) & 0xFF}


def _log_line(log_fh, text: str) -> None:
    log_fh.write(f"[gpuplatform] {text}\n".encode("utf-8", errors="replace"))
    log_fh.flush()


def _parse(argv: list[str]) -> tuple[str, str | None, float, tuple[int, int | None] | None, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: supervise.py --dir TASKDIR [--cwd DIR] [--grace S] [--watch PID:START] -- ARGV...")
    sep = argv.index("--")
    opts, command = argv[:sep], argv[sep + 1:]
    task_dir, cwd, grace, watch = None, None, 2.0, None
    i = 0
    while i < len(opts):
        if opts[i] in ("--dir", "--cwd", "--grace", "--watch") and i + 1 < len(opts):
            if opts[i] == "--dir":
                task_dir = opts[i + 1]
            elif opts[i] == "--cwd":
                cwd = opts[i + 1]
            elif opts[i] == "--watch":
                pid, _, start = opts[i + 1].partition(":")
                try:
                    watch = (int(pid), int(start) if start else None)
                except ValueError:
                    raise SystemExit(f"supervise.py: --watch takes PID:START, not {opts[i + 1]!r}") from None
            else:
                grace = float(opts[i + 1])
            i += 2
        else:
            raise SystemExit(f"supervise.py: unknown argument {opts[i]!r}")
    if not task_dir or not command:
        raise SystemExit("supervise.py: --dir and a command are required")
    return task_dir, cwd, grace, watch, command


def _watched_alive(watch: tuple[int, int | None]) -> bool:
    """True while the watched process (pid, start time) runs: not gone, not a zombie, not a reused pid."""
    st = _stat(watch[0])
    return st is not None and st[0] not in ("Z", "X") and (watch[1] is None or st[2] == watch[1])


def _gone_at_end(watch: tuple[int, int | None] | None, result: dict, task_dir: str | None) -> bool:
    """True when the task's main process ended (`result`) after the watched agent was gone though this supervisor had
    not yet seen it (it looks every WATCH_SECONDS): a stop of the agent's tasks that came first (the local demo's
    stop_tasks_in, stop.json written, or a SIGTERM to the agent's and the task's processes at once) is the same
    platform fault (trial 22: one task of a gang read "exit code 143", failing its job). A clean exit 0 that nobody
    asked for (no stop.json) stays the task's own end."""
    if not watch or _watched_alive(watch):
        return False
    return result != {"exit_code": 0} or (task_dir is not None and _stop_deadline(task_dir) is not None)


def _wait_child(child_pid: int, watch: tuple[int, int | None] | None, grace: float, log_fh,
                task_dir: str | None = None) -> dict:
    """Reap children until `child_pid` exits; its result ({"exit_code": n} or {"signal": s}). With `watch`: poll,
    and once the watched agent is gone terminate the task's whole tree (SIGTERM, `grace` seconds, SIGKILL until the
    child is reaped); the result then also has "agent_gone": the watched pid (this stop, not the task, ended it), as
    it has when the agent is found gone as the child is reaped (_gone_at_end)."""
    kill_at = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG if watch else 0)
        except InterruptedError:
            continue
        except ChildProcessError:  # cannot happen while the child is unreaped; be safe
            return {"exit_code": 1, **({"agent_gone": watch[0]} if kill_at is not None else {})}
        if pid == child_pid:
            result = _status_result(status)
            if kill_at is not None or _gone_at_end(watch, result, task_dir):
                if kill_at is None:
                    _log_line(log_fh, f"the agent (pid {watch[0]}) is gone: the task ended as it was stopped with it")
                result["agent_gone"] = watch[0]
            return result
        if pid:
            continue  # an orphan re-parented to us: reaped, look again at once
        if kill_at is None and not _watched_alive(watch):
            _log_line(log_fh, f"the agent (pid {watch[0]}) is gone: stopping the task")
            _signal_all(_descendants(os.getpid()), signal.SIGTERM)
            kill_at = time.monotonic() + grace
        elif kill_at is not None and time.monotonic() >= kill_at:
            _signal_all(_descendants(os.getpid()), signal.SIGKILL)
        time.sleep(WATCH_SECONDS if kill_at is None else 0.02)


def main(argv: list[str] | None = None) -> int:
    task_dir, cwd, grace, watch, command = _parse(sys.argv[1:] if argv is None else argv)
    _set_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    me = os.getpid()
    st = _stat(me)
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = ""
    _write_json(os.path.join(task_dir, "supervisor.json"),
                {"pid": me, "start_time": st[2] if st else None, "boot_id": boot})
    exit_path = os.path.join(task_dir, "exit.json")
    with open(os.path.join(task_dir, "output.log"), "ab", buffering=0) as log_fh:
        oom_before = _oom_counters()
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
                                     cwd=cwd, close_fds=True)
        except OSError as exc:
            code = 127 if exc.errno == errno.ENOENT else 126
            if cwd and exc.filename == cwd:
                _log_line(log_fh, f"cannot start {command[0]!r}: working directory {cwd!r}: {exc.strerror or exc}")
            else:
                _log_line(log_fh, f"cannot start {command[0]!r}: {exc.strerror or exc}")
            _write_json(exit_path, {"exit_code": code, "ended_at": time.time()})
            return 0
        result = _wait_child(child.pid, watch, grace, log_fh, task_dir)
        child.returncode = 0  # reaped by us: keep Popen from waiting on it again
        _cleanup(grace, task_dir)
        result["ended_at"] = time.time()  # the tree is gone: the task's end (the OOM look below is the supervisor's)
        if result.get("signal") == signal.SIGKILL or result.get("exit_code") == 128 + signal.SIGKILL:
            kernel = _kernel_oom_line(child.pid, _kmsg_records()) if result.get("signal") else None
            line = f"kernel log: {kernel[:400]}" if kernel else _oom_line(oom_before, _oom_counters())
            if line:
                _log_line(log_fh, line)
    _write_json(exit_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
