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

A heterogeneous job is one entry per component in both squeue (`het_job_id`, `het_job_offset`) and the
completion file (`HetJobId`, `HetJobOffset`); both readers fold them into one job under the leader's id
(`merge_het`, `parse_jobcomp`): its state is the most telling of its components' (`STATE_RANK`), its nodes
and GPU indices the components' together, in component order (a node is in one component only).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

__all__ = ["Result", "SlurmError", "SubprocessRunner", "SlurmCLI", "SlurmJob", "SlurmNode", "parse_gres_indices",
           "expand_hostlist", "parse_jobcomp", "merge_het", "combined_state", "ENDED_STATES"]

ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})
# a het job's state from its components': the first state of this order any component is in. Not ended before
# ended (the job is not over while a component runs); among ended states, the one that says why it ended
# (a NODE_FAIL component beside the CANCELLED ones Slurm ended with it) before FAILED, CANCELLED, COMPLETED
STATE_RANK = ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "COMPLETING", "NODE_FAIL",
              "BOOT_FAIL", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE", "FAILED", "SPECIAL_EXIT", "REVOKED",
              "CANCELLED", "COMPLETED")


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
    het_job_id: str = ""  # the leader's id for a component of a heterogeneous job, "" otherwise
    het_job_offset: int = 0
    components: list = field(default_factory=list)  # a merged het job: its SlurmJob components, in offset order

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


def combined_state(states) -> str:
    """The state of a het job whose components are in `states` (STATE_RANK); an unknown state counts as
    running (not ended)."""
    states = list(states)
    unknown = [s for s in states if s not in STATE_RANK]
    if unknown:
        return unknown[0]
    return min(states, key=STATE_RANK.index) if states else ""


def parse_jobcomp(text: str) -> dict[str, dict[str, str]]:
    """jobcomp/filetxt records -> {job id: {"JobState": ..., "ExitCode": "0:0", "NodeList": ..., "Name": ...}}.
    The last record of a job id wins (a requeued Slurm job writes one per run). A het job's component
    records fold into its leader's (HetJobId): JobState = combined_state, NodeList = the components' lists
    joined with "," in offset order, ExitCode = the highest; the components' ids are not keys."""
    out = {}
    for line in text.splitlines():
        rec = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in rec:
            out[rec["JobId"]] = rec
    groups: dict[str, list] = {}
    for rec in out.values():
        leader = rec.get("HetJobId", "")
        if leader and leader != "0":
            groups.setdefault(leader, []).append(rec)
    for leader, recs in groups.items():
        recs.sort(key=lambda r: int(r.get("HetJobOffset") or 0))
        for r in recs:
            if r["JobId"] != leader:
                out.pop(r["JobId"], None)
        head = next((r for r in recs if r["JobId"] == leader), recs[0])
        out[leader] = {**head, "JobId": leader, "JobState": combined_state(r.get("JobState", "") for r in recs),
                       "NodeList": ",".join(r.get("NodeList", "") for r in recs if r.get("NodeList")),
                       "ExitCode": max((r.get("ExitCode", "0:0") for r in recs),
                                       key=lambda e: tuple(int(x) if x.isdigit() else 0 for x in e.split(":")))}
    return out


def merge_het(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """squeue's entries with a het job's components folded into one SlurmJob per het job (module docstring):
    job_id = the leader's, `components` = the entries in offset order, state = combined_state, reason and
    exit code of the component that gave the state (the highest exit code when they agree), node_list and
    gpus joined, times: the earliest start and submit, the latest end (0 while a component has not ended).
    Other jobs are returned as they are, in the order given (a het job at its leader's place)."""
    groups: dict[str, list[SlurmJob]] = {}
    for j in jobs:
        if j.het_job_id:
            groups.setdefault(j.het_job_id, []).append(j)
    out, done = [], set()
    for j in jobs:
        if not j.het_job_id:
            out.append(j)
            continue
        if j.het_job_id in done:
            continue
        done.add(j.het_job_id)
        parts = sorted(groups[j.het_job_id], key=lambda c: c.het_job_offset)
        state = combined_state(c.state for c in parts)
        telling = [c for c in parts if c.state == state]
        leader = next((c for c in parts if c.job_id == c.het_job_id), parts[0])
        gpus: dict[str, list[int]] = {}
        for c in parts:
            gpus.update(c.gpus)
        out.append(SlurmJob(job_id=j.het_job_id, name=leader.name, state=state,
                            reason=next((c.reason for c in telling if c.reason and c.reason != "None"),
                                        telling[0].reason),
                            node_list=[n for c in parts for n in c.node_list],
                            exit_code=max(c.exit_code for c in telling),
                            start_time=min((c.start_time for c in parts if c.start_time), default=0),
                            end_time=0 if any(not c.end_time for c in parts) else max(c.end_time for c in parts),
                            submit_time=min((c.submit_time for c in parts if c.submit_time), default=0),
                            comment=leader.comment, gpus=gpus, het_job_id=j.het_job_id, components=parts))
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
        """The partition's jobs still in slurmctld's memory (pending, running, and ended within MinJobAge), a
        heterogeneous job as one SlurmJob under its leader's id (merge_het)."""
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
                                gpus={n: parse_gres_indices(g) for n, g in zip(nodes, gres)},
                                het_job_id=str(j.get("het_job_id") or "") if j.get("het_job_id") else "",
                                het_job_offset=int(j.get("het_job_offset") or 0)))
        return merge_het(out)

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

    def kill_step(self, job_id: str, step: int = 0) -> None:
        """SIGKILL every process of step `step` of job `job_id` (a het job: of one component's job id) at once:
        `scancel --signal=KILL <id>.<step>`. Not the job: Slurm takes a job's SIGKILL (`scancel --signal=KILL
        <id>`, with or without --full) as "cancel the job", which is SIGTERM to every process and SIGKILL only
        KillWait later (Slurm 22.05: a second SIGTERM where the platform promised SIGKILL, trial 19 F3)."""
        self._run(["scancel", "--signal=KILL", f"{job_id}.{step}"])

    def cancel(self, job_id: str) -> None:
        """End the job: Slurm signals, waits KillWait, kills, and its process tracking removes what is left."""
        self._run(["scancel", job_id])

    def drain(self, node: str, reason: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=resume"])
