"""A private Slurm on this host (tests, CI, `manage.py demo --slurm`): one munged, one slurmctld and one
`slurmd -N <node>` per node, all under one directory, on loopback ports, with GPU GRES declared on
placeholder device files and job completion records in `<dir>/jobcomp.txt`. Standard library only.

Needs Debian's packages `munge slurmctld slurmd slurm-client` (Slurm 22.05 here). Runs as root (slurmd
launches jobs as their submitting user). Nothing under /etc is touched: every command gets
SLURM_CONF=<dir>/slurm.conf (LocalSlurm.env), munge listens on <dir>/munge.sock.

    with LocalSlurm("/tmp/x", nodes=["gpn1", "gpn2"], gpus=2) as ls:
        subprocess.run(["sinfo"], env=ls.env)

Process tracking is proctrack/linuxproc (no cgroups in containers): Slurm kills every descendant of a
task's process, which is what "cancel leaves no process behind" relies on.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["LocalSlurm", "SlurmSetupError", "slurm_installed", "PACKAGES", "PARTITION"]

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
PARTITION = "gpuplatform"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


class SlurmSetupError(RuntimeError):
    """The local Slurm could not be started (the message names the step and quotes its log)."""


def slurm_installed() -> list[str]:
    """The binaries of BINARIES missing from PATH (and /usr/sbin); [] when all are there."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 now (the kernel's choice; a race is unlikely)."""
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _placeholder_device(path: Path) -> None:
    """A character device file at `path` for gres.conf (slurmd refuses plain files): mknod of /dev/null's
    numbers (1, 3), else a symbolic link to /dev/null where mknod is not allowed."""
    if path.exists() or path.is_symlink():
        return
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        path.symlink_to("/dev/null")


def _ancestors(pid: int) -> set[int]:
    """`pid` and its ancestors (from /proc/<pid>/stat)."""
    out = set()
    while pid > 0 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _bin(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin") or name


class LocalSlurm:
    """Start (`start()`, or use as a context manager) and stop (`stop()`) a Slurm of `nodes` (names) with
    `gpus` GPUs and `cpus` CPUs each under `directory`. `slurmd_timeout` (s) is how long slurmctld waits
    for a silent slurmd before the node is DOWN and its jobs end NODE_FAIL; `kill_wait` (s) is Slurm's
    SIGTERM-to-SIGKILL gap for its own kills (time limit). `env` is os.environ plus SLURM_CONF."""

    def __init__(self, directory: str | os.PathLike, nodes=("gpn1", "gpn2"), *, gpus: int = 2, cpus: int = 4,
                 slurmd_timeout: int = 10, kill_wait: int = 2):
        self.dir = Path(directory).resolve()
        self.nodes = list(nodes)
        self.gpus, self.cpus = gpus, cpus
        self.slurmd_timeout, self.kill_wait = slurmd_timeout, kill_wait
        self.conf = self.dir / "slurm.conf"
        self.jobcomp = self.dir / "jobcomp.txt"
        self.socket = self.dir / "munge.sock"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.env.pop("SLURM_JOB_ID", None)
        self._procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.killed: list[str] = []  # what the last sweep killed ("pid command")
        self.still_running: list[str] = []  # what it could not

    # -- configuration -------------------------------------------------------------------------------------
    def write_config(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "dev", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        ports = _free_ports(1 + len(self.nodes))
        self.ports = {"slurmctld": ports[0], **dict(zip(self.nodes, ports[1:]))}
        gres_lines = []
        node_lines = []
        for node in self.nodes:
            files = []
            for i in range(self.gpus):
                f = d / "dev" / f"{node}-nvidia{i}"
                _placeholder_device(f)
                files.append(str(f))
            (d / "spool" / node).mkdir(exist_ok=True)
            if self.gpus:
                gres_lines += [f"NodeName={node} Name=gpu File={f}" for f in files]
            node_lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={self.ports[node]} "
                              f"CPUs={self.cpus} RealMemory=1024" + (f" Gres=gpu:{self.gpus}" if self.gpus else "")
                              + " State=UNKNOWN")
        (d / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        self.conf.write_text("\n".join([
            "# written by gpuplatform.slurm.local (a private Slurm for tests and the demo)",
            "ClusterName=gpuplatform",
            f"SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ports['slurmctld']}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'spool'}/%n/slurmd.pid",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={d / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "GresTypes=gpu", "JobCompType=jobcomp/filetxt", f"JobCompLoc={self.jobcomp}",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2", f"SlurmdTimeout={self.slurmd_timeout}", f"KillWait={self.kill_wait}",
            "InactiveLimit=0", "MinJobAge=600", "MessageTimeout=5",
            # heterogeneous jobs are started by the backfill scheduler only: every second, not every 30 s
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "SlurmdParameters=config_overrides",  # CPUs / GRES as declared, whatever the host has
            *node_lines,
            f"PartitionName={PARTITION} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
            ""]))

    # -- processes -----------------------------------------------------------------------------------------
    def _spawn(self, key: str, argv: list[str], extra_env: dict | None = None) -> None:
        log = open(self.dir / "log" / f"{key}.out", "ab")
        self._procs[key] = subprocess.Popen(argv, env={**self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def start_munge(self) -> None:
        key = self.dir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.dir.chmod(0o755)
        self._spawn("munged", [_bin("munged"), "-F", "--force", f"--socket={self.socket}", f"--key-file={key}",
                               f"--pid-file={self.dir / 'munged.pid'}", f"--log-file={self.dir / 'log' / 'munged.log'}",
                               f"--seed-file={self.dir / 'munged.seed'}"])
        self._wait(lambda: self.socket.exists(), "munged", 10)

    def start_slurmd(self, node: str) -> None:
        # the marker reaches its slurmstepd processes too (they inherit slurmd's environment): kill_slurmd
        self._spawn(f"slurmd-{node}", [_bin("slurmd"), "-D", "-N", node], {"GPUPLATFORM_SLURMD_NODE": f"{self.conf}:{node}"})

    def kill_slurmd(self, node: str) -> None:
        """The node is lost: SIGKILL its slurmd, its slurmstepd processes and its jobs' tasks (found by marks in
        their environment); slurmctld declares it DOWN and its jobs NODE_FAIL after slurmd_timeout."""
        p = self._procs.pop(f"slurmd-{node}", None)
        if p is not None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        daemon = f"GPUPLATFORM_SLURMD_NODE={self.conf}:{node}".encode()
        task = {f"SLURMD_NODENAME={node}".encode(), f"SLURM_CONF={self.conf}".encode()}  # this Slurm's tasks only
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                env = set((proc / "environ").read_bytes().split(b"\0"))
                if daemon in env or task <= env:
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def start(self) -> "LocalSlurm":
        missing = slurm_installed()
        if missing:
            raise SlurmSetupError(f"missing {', '.join(missing)}: apt-get install -y {' '.join(PACKAGES)}")
        self.write_config()
        self.start_munge()
        self._spawn("slurmctld", [_bin("slurmctld"), "-D", "-i"])
        self._wait(lambda: self.run("scontrol", "ping").returncode == 0
                   and "UP" in self.run("scontrol", "ping").stdout, "slurmctld", 30)
        for node in self.nodes:
            self.start_slurmd(node)
        self.wait_idle(self.nodes, 60)
        return self

    def wait_idle(self, nodes, timeout: float) -> None:
        def idle():
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
            states = dict(zip(out[::2], out[1::2]))
            return all(states.get(n, "").startswith(("idle", "mix", "alloc")) for n in nodes)
        self._wait(idle, "slurmd", timeout)

    def run(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run([_bin(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def _wait(self, ok, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if ok():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            for key, p in self._procs.items():
                if p.poll() is not None and key.startswith(what.split("-")[0]):
                    break
            time.sleep(0.2)
        logs = []
        for f in sorted((self.dir / "log").glob("*")):
            logs.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-1500:])
        raise SlurmSetupError(f"{what} did not come up within {timeout:.0f} s\n" + "\n".join(logs))

    def stop(self) -> list[str]:
        """Cancel every job, stop every daemon (SIGTERM, SIGKILL after 5 s) and reap them; then kill what is
        left of this Slurm's nodes (`sweep`: a slurmstepd whose slurmd died survives scancel and its daemon's
        end, with its tasks: trial 19, F12). Returns what still runs after that ([] normally); `killed` lists
        what the sweep found."""
        if "slurmctld" in self._procs:
            try:
                self.run("scancel", "--partition", PARTITION, timeout=5)
            except (OSError, subprocess.SubprocessError):
                pass
        for key in sorted(self._procs, key=lambda k: k == "munged"):  # munged last
            p = self._procs[key]
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self._procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self._procs.clear()
        return self.sweep()

    def leftovers(self) -> list[tuple[int, str]]:
        """(pid, command line) of every live process of this Slurm's nodes, other than this process and its
        ancestors: a slurmd or slurmstepd of one of its nodes (GPUPLATFORM_SLURMD_NODE=<conf>:<node>, inherited
        from its slurmd), a task of one of its jobs (SLURM_CONF=<conf> and a SLURM_JOB_ID in its environment:
        sbatch passes SLURM_CONF on, slurmstepd adds the job id; a task that detached itself keeps both), and
        every descendant of those. Not a user's shell that exported SLURM_CONF, nor one whose working
        directory is under `dir` (no job id, no marked ancestor)."""
        marks = {f"GPUPLATFORM_SLURMD_NODE={self.conf}:{n}".encode() for n in self.nodes}
        conf = f"SLURM_CONF={self.conf}".encode()
        skip = _ancestors(os.getpid())
        procs: dict[int, tuple[int, str, bool]] = {}  # pid -> (ppid, command, marked)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in skip:
                continue
            try:
                stat_line = (proc / "stat").read_text()
                fields = stat_line.rpartition(")")[2].split()
                if fields[0] in ("Z", "X"):
                    continue  # a zombie: nothing runs, its parent reaps it
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                env = set((proc / "environ").read_bytes().split(b"\0"))
            except (OSError, ValueError, IndexError):
                continue
            marked = bool(env & marks) or (conf in env and any(e.startswith(b"SLURM_JOB_ID=") for e in env))
            procs[int(proc.name)] = (int(fields[1]), cmd or stat_line.split(" ", 2)[1], marked)
        ours = {pid for pid, (_, _, marked) in procs.items() if marked}
        grew = True
        while grew:  # and their descendants
            new = {pid for pid, (ppid, _, _) in procs.items() if ppid in ours and pid not in ours}
            ours |= new
            grew = bool(new)
        return sorted((pid, procs[pid][1]) for pid in ours)

    def sweep(self, timeout: float = 5.0) -> list[str]:
        """SIGKILL every process `leftovers` finds, wait up to `timeout` s for them to go, and say so on stderr
        when there were any (killed, and still running). Returns "pid command" of those still running."""
        found = self.leftovers()
        self.killed = [f"{pid} {cmd}" for pid, cmd in found]
        for pid, _ in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        end = time.monotonic() + timeout
        left = found
        while left and time.monotonic() < end:
            time.sleep(0.1)
            left = self.leftovers()
        self.still_running = [f"{pid} {cmd}" for pid, cmd in left]
        if found:
            print(f"local Slurm {self.dir}: killed {len(found)} process(es) left of its nodes after its daemons "
                  f"stopped: {'; '.join(self.killed)}", file=sys.stderr)
        if left:
            print(f"local Slurm {self.dir}: STILL RUNNING after SIGKILL: {'; '.join(self.still_running)}",
                  file=sys.stderr)
        return self.still_running

    def __enter__(self) -> "LocalSlurm":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
