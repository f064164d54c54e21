"""The Slurm command line behind one small runner interface (docs/slurm.md). Standard library only.

`Runner`: any callable `(argv: list[str], input: str | None) -> Result(returncode, stdout, stderr)`.
`SubprocessRunner` runs the real commands (with SLURM_CONF when given); tests pass a recorded or fake one
(tests/slurm/fake.py replays outputs recorded from a real Slurm 22.05, tests/slurm/recorded/).

`SlurmCLI(runner)` wraps the few commands the backend uses and reads only machine output:
`sbatch --parsable` (the job id), `squeue --json` and `sinfo --json` (Slurm's OpenAPI v0.0.38 schema in
22.05; 22.05's scontrol has no --json, so GPU indices come from squeue's `gres_detail`,
e.g. "gpu:2(IDX:0-1)"), `scancel`, `scontrol update` (drain / resume), and the job completion file of
`JobCompType=jobcomp/filetxt` ("Key=Value ..." records, one job a line). Every failing command raises
SlurmError naming the command and quoting its stderr.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

__all__ = ["Result", "SlurmError", "SubprocessRunner", "SlurmCLI", "SlurmJob", "SlurmNode", "parse_gres_indices",
           "expand_hostlist", "parse_jobcomp", "ENDED_STATES"]

ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str = ""


class SlurmError(RuntimeError):
    """A Slurm command failed (or answered something unreadable)."""


class SubprocessRunner:
    """Run Slurm commands as subprocesses, `timeout` seconds each, with SLURM_CONF=`conf` when given."""

    def __init__(self, conf: str | None = None, *, timeout: float = 30.0):
        self.env = dict(os.environ)
        if conf:
            self.env["SLURM_CONF"] = conf
        self.timeout = timeout
        self.calls = 0

    def __call__(self, argv: list[str], input: str | None = None) -> Result:
        self.calls += 1
        try:
            p = subprocess.run(argv, input=input, env=self.env, capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Result(127, "", f"{argv[0]}: {exc}")
        return Result(p.returncode, p.stdout, p.stderr)


@dataclass
class SlurmJob:
    """One job as squeue --json shows it. Times are Unix seconds (0 = not yet); `node_list` expanded;
    `gpus` = {node: [GPU indices]} from gres_detail (in node_list order)."""
    job_id: str
    name: str
    state: str
    reason: str = ""
    node_list: list[str] = field(default_factory=list)
    exit_code: int = 0
    start_time: int = 0
    end_time: int = 0
    submit_time: int = 0
    comment: str = ""
    gpus: dict[str, list[int]] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


@dataclass
class SlurmNode:
    """One node as sinfo --json shows it: `state` (idle, mixed, allocated, down, ...), `flags` (DRAIN,
    NOT_RESPONDING, ...), `reason` (drain / down reason), `gpus` (from gres "gpu:8" or "gpu:h100:8")."""
    name: str
    state: str
    flags: list[str]
    reason: str
    address: str
    gpus: int
    cpus: int
    memory_mib: int
    features: str = ""
    partitions: list[str] = field(default_factory=list)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in ("drained", "draining")

    @property
    def down(self) -> bool:
        return self.state in ("down", "future")  # NOT_RESPONDING alone is transient: Slurm decides DOWN


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compact host list -> names: "gpn[1-3,7],login" -> [gpn1, gpn2, gpn3, gpn7, login]. Zero padding
    is kept ("n[01-02]" -> n01, n02). One bracket group per name (what Slurm writes for node names)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text or ""):
        m = re.fullmatch(r"(.*?)\[([^\]]*)\](.*)", part)
        if not m:
            if part:
                out.append(part)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not hi:
                out.append(f"{head}{lo}{tail}")
                continue
            width = len(lo) if lo.startswith("0") else 0
            out += [f"{head}{str(i).zfill(width)}{tail}" for i in range(int(lo), int(hi) + 1)]
    return out


def parse_gres_indices(detail: str) -> list[int]:
    """"gpu:2(IDX:0-1)" / "gpu:a100:3(IDX:0,2-3)" -> [0, 1] / [0, 2, 3]; [] when no IDX part."""
    m = re.search(r"IDX:([0-9,\-]+)", detail or "")
    if not m:
        return []
    out = []
    for r in m.group(1).split(","):
        lo, _, hi = r.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _gpu_count(gres: str) -> int:
    """"gpu:8", "gpu:h100:8(S:0-1)", "gpu:2,nic:1" -> 8, 8, 2; 0 without gpu."""
    total = 0
    for item in (gres or "").split(","):
        m = re.match(r"gpu(?::[^:(]+)?:(\d+)", item)
        if m:
            total += int(m.group(1))
    return total


def parse_jobcomp(text: str) -> dict[str, dict[str, str]]:
    """jobcomp/filetxt records -> {job id: {"JobState": ..., "ExitCode": "0:0", "NodeList": ..., "Name": ...}}.
    The last record of a job id wins (a requeued Slurm job writes one per run)."""
    out = {}
    for line in text.splitlines():
        rec = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in rec:
            out[rec["JobId"]] = rec
    return out


class SlurmCLI:
    """The Slurm commands the backend uses, through `runner`. `partition`: the partition the platform owns."""

    def __init__(self, runner, *, partition: str = "gpuplatform"):
        self.runner = runner
        self.partition = partition

    def _run(self, argv: list[str], input: str | None = None) -> str:
        r = self.runner(argv, input)
        if r.returncode != 0:
            raise SlurmError(f"{shlex.join(argv)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[:400]}")
        return r.stdout

    def _json(self, argv: list[str]) -> dict:
        out = self._run(argv)
        try:
            data = json.loads(out)
        except ValueError as exc:
            raise SlurmError(f"{shlex.join(argv)} did not answer JSON: {exc}") from exc
        if data.get("errors"):
            raise SlurmError(f"{shlex.join(argv)}: {data['errors']}")
        return data

    def submit(self, script: str) -> str:
        """sbatch --parsable with the batch script on stdin -> the Slurm job id ("123", or "123;cluster")."""
        out = self._run(["sbatch", "--parsable"], input=script).strip()
        job_id = out.split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {out!r}, not a job id")
        return job_id

    def jobs(self) -> list[SlurmJob]:
        """The partition's jobs still in slurmctld's memory (pending, running, and ended within MinJobAge)."""
        data = self._json(["squeue", "--json", "--partition", self.partition, "--states", "all"])
        out = []
        for j in data.get("jobs", []):
            nodes = expand_hostlist(j.get("nodes") or "")
            gres = j.get("gres_detail") or []
            out.append(SlurmJob(job_id=str(j["job_id"]), name=j.get("name", ""), state=j.get("job_state", ""),
                                reason=j.get("state_reason") or "", node_list=nodes,
                                exit_code=int(j.get("exit_code") or 0), start_time=int(j.get("start_time") or 0),
                                end_time=int(j.get("end_time") or 0), submit_time=int(j.get("submit_time") or 0),
                                comment=j.get("comment") or "",
                                gpus={n: parse_gres_indices(g) for n, g in zip(nodes, gres)}))
        return out

    def nodes(self) -> list[SlurmNode]:
        """Every node of the partition, from sinfo --json (one entry per node)."""
        data = self._json(["sinfo", "--json"])
        out = []
        for n in data.get("nodes", []):
            if self.partition not in (n.get("partitions") or []):
                continue
            out.append(SlurmNode(name=n["name"], state=n.get("state", ""), flags=list(n.get("state_flags") or []),
                                 reason=n.get("reason") or "", address=n.get("address") or "",
                                 gpus=_gpu_count(n.get("gres") or ""), cpus=int(n.get("cpus") or 0),
                                 memory_mib=int(n.get("real_memory") or 0), features=n.get("active_features") or "",
                                 partitions=list(n.get("partitions") or [])))
        return out

    def signal(self, job_id: str, sig: str = "TERM", *, full: bool = False) -> None:
        """Send `sig` to every process of the job's steps (the tasks; Slurm's process tracking reaches their
        children); `full` also to the batch shell. A TERM must not reach the batch shell: srun takes a SIGTERM
        as "abort the step" and kills the tasks at once, before they could stop cleanly."""
        self._run(["scancel", *(["--full"] if full else []), f"--signal={sig}", job_id])

    def cancel(self, job_id: str) -> None:
        """End the job: Slurm signals, waits KillWait, kills, and its process tracking removes what is left."""
        self._run(["scancel", job_id])

    def drain(self, node: str, reason: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=resume"])
