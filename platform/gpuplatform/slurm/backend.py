"""The Slurm backend: the second executor behind the assignment interface (DESIGN section 11, docs/slurm.md).

`SlurmBackend(cli, ...).sync(now)` is one round, the backend's whole loop (`manage.py slurm_backend` repeats
it every SLURM_POLL_SECONDS; it keeps no state of its own between rounds, so a restarted backend finds its
jobs: the database holds each gang's Slurm job id, Slurm holds the jobs, named gpp-<job>-a<attempt>):

1. Nodes (`sync_nodes`, after squeue is read): every node of the partition (sinfo --json) is a platform node with executor
   "slurm" (created on first sight with its GPUs) that heartbeats while Slurm has it up; a node drained or down in Slurm is drained here with
   Slurm's reason; a node cordoned or drained here is drained in Slurm (`scontrol update ... state=drain
   reason="gpuplatform: ..."`) and resumed there when it is ready here again. The cluster's topology file
   (SLURM_TOPOLOGY_CONF) becomes the domain tree through the topology importer (`sync_topology`).
2. Gangs: the same assignments the node agents read (execution.node_assignments, per Slurm node) grouped by
   job. A gang whose tasks should run and that has no Slurm job for this attempt is submitted (script.py);
   one Slurm has not started within SLURM_START_TIMEOUT is cancelled and requeued with Slurm's reason; one
   sbatch refuses SBATCH_REFUSALS times fails with sbatch's error.
3. What Slurm did, applied through the agents' service functions (execution.report_task_event,
   execution.append_log): a task's launcher started -> "started"; its exit file -> "exited" (code or
   signal); new output -> log chunks (64 KiB per task per round); the Slurm job ended with tasks left
   unreported -> by Slurm's state: TIMEOUT ends the job as a time limit, NODE_FAIL requeues the gang whole as
   a lost node (requeued_after_failure, "node lost: N task(s) failed on <node>", as failure detection does),
   PREEMPTED requeues it whole as a preemption (no restart used), BOOT_FAIL requeues it whole and holds its
   nodes not ready with Slurm's reason until Slurm has had them out of service and back, OUT_OF_MEMORY is "host out of memory", CANCELLED after our kill is SIGKILL, anything else is "lost" with
   Slurm's state and reason.
4. Stops: a gang whose assignments say "stop" gets `scancel --signal=TERM` (its tasks; one SIGTERM per
   process: the launcher forwards nothing) at once and `scancel --signal=KILL <id>.0` (the step, of every
   component) + `scancel` at its stop deadline (a job's --signal=KILL would be Slurm's cancel: TERM again,
   KILL after KillWait). A platform job (gpp-...) Slurm runs that the platform no longer lists is cancelled
   (KILLed as at the deadline when its TERM was sent already); its tasks the platform released before
   Slurm's job ended keep how it ended (the exit file, else SIGKILL after a CANCELLED / TIMEOUT job).
"""
from __future__ import annotations

import logging
import os
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max

from .. import clock
from ..agent.executor import decode_output, trim_utf8_tail
from ..allocations import check_nodes, write_allocations
from ..audit import record_event, record_events
from ..execution import append_log, master_port, node_assignments, report_task_event, stop_job
from ..execution.assignments import nodes_assignments
from ..lifecycle import lock_jobs, requeue_job
from ..models import Allocation, Gpu, Job, Node, Task, TaskLog
from ..scheduling.evict import REQUEUE_STOPS
from .cli import SlurmCLI, SlurmError, SlurmJob, expand_hostlist, parse_jobcomp
from .script import GangTask, build_job, job_name, layout, parse_job_name

__all__ = ["SlurmBackend", "RoundStats", "NEVER_STARTED"]

log = logging.getLogger("gpuplatform.slurm")

NEVER_STARTED = "stopped before Slurm started it"
LOG_CHUNK = 65536
SBATCH_REFUSALS = 3  # failed sbatch calls for one attempt before its gang fails
OURS = "gpuplatform: "  # the reason prefix of a drain the platform asked Slurm for
THEIRS = "Slurm: "  # the health_reason prefix of a drain Slurm asked the platform for
BOOT_FAIL = "Slurm: BOOT_FAIL "  # the health_reason of a node held not ready after a job's BOOT_FAIL


@dataclass
class RoundStats:
    submitted: list = field(default_factory=list)  # platform job ids submitted this round
    started: int = 0
    exited: int = 0
    lost: int = 0
    log_bytes: int = 0
    signalled: list = field(default_factory=list)
    killed: list = field(default_factory=list)
    requeued: list = field(default_factory=list)
    orphans_cancelled: list = field(default_factory=list)
    errors: list = field(default_factory=list)


class SlurmBackend:
    """One Slurm cluster's executor. cli: a SlurmCLI; output_dir: the shared directory for launchers and
    per-task output (default SLURM_OUTPUT_DIR); mode: "placement" or "admission" (default SLURM_MODE);
    start_timeout: seconds (default SLURM_START_TIMEOUT); jobcomp_file: path (default SLURM_JOBCOMP_FILE);
    topology_conf: the cluster's topology.conf / topology.yaml (default SLURM_TOPOLOGY_CONF; "" = none)."""

    def __init__(self, cli: SlurmCLI, *, output_dir: str | None = None, mode: str | None = None,
                 start_timeout: float | None = None, jobcomp_file: str | None = None, flavor: str | None = None,
                 topology_conf: str | None = None):
        self.cli = cli
        self.topology_conf = settings.SLURM_TOPOLOGY_CONF if topology_conf is None else topology_conf
        self._topology_refused = None  # the text of a topology file refused once (refused again silently)
        self.output_dir = Path(output_dir or settings.SLURM_OUTPUT_DIR)
        self.mode = mode or settings.SLURM_MODE
        if self.mode not in ("placement", "admission"):
            raise ValueError(f"SLURM_MODE must be placement or admission, not {self.mode!r}")
        self.start_timeout = float(settings.SLURM_START_TIMEOUT if start_timeout is None else start_timeout)
        self.jobcomp_file = settings.SLURM_JOBCOMP_FILE if jobcomp_file is None else jobcomp_file
        self.flavor = flavor or settings.SLURM_GPU_FLAVOR
        self._now = None
        self._submitted: list = []
        self._slurm_nodes: list = []  # sinfo's nodes of the last node sync

    # -- one round ---------------------------------------------------------------------------------------------
    def sync(self, now: datetime | None = None) -> RoundStats:
        """One round (module docstring). Slurm errors are logged and counted (RoundStats.errors); the round goes
        on with what it could read, and the next round retries."""
        now = self._now = now or clock.now()
        stats = RoundStats()
        try:
            jobs = self.cli.jobs()  # read before the nodes: a job Slurm ended NODE_FAIL is seen as such, not
        except SlurmError as exc:   # as the eviction the drain of its down node would start
            stats.errors.append(str(exc))
            log.warning("slurm: squeue failed, jobs skipped: %s", exc)
            jobs = None
        try:
            self.sync_nodes(now)
        except SlurmError as exc:
            stats.errors.append(str(exc))
            log.warning("slurm: nodes not synced: %s", exc)
        if jobs is None:
            return stats
        by_name: dict[str, SlurmJob] = {}
        for j in sorted(jobs, key=lambda j: int(j.job_id)):
            by_name[j.name] = j  # the newest Slurm job of a name wins
        by_id = {j.job_id: j for j in jobs}
        completed = self._jobcomp()
        gangs = self._gangs(now)
        listed = set()
        self._submitted = []
        rows = {}
        ids = list(gangs)
        for i in range(0, len(ids), 1000):
            rows.update({r["id"]: r for r in Job.objects.filter(pk__in=ids[i:i + 1000]).values(*self.JOB_FIELDS)})
        try:
            for job_id, tasks in gangs.items():
                attempt = tasks[0][1]["attempt"]
                listed.add(job_name(job_id, attempt))
                try:
                    self._drive(job_id, attempt, tasks, by_name, by_id, completed, now, stats, rows.get(job_id))
                except SlurmError as exc:
                    stats.errors.append(str(exc))
                    log.warning("slurm: job %s: %s", job_id, exc)
        finally:
            self._flush_submissions()
        for j in jobs:  # platform jobs Slurm runs that the platform no longer lists: cancel them
            if parse_job_name(j.name) and j.name not in listed and not j.ended and j.state != "COMPLETING":
                try:
                    self._cancel_orphan(j, now)
                    stats.orphans_cancelled.append(j.job_id)
                except SlurmError as exc:
                    stats.errors.append(str(exc))
        try:
            self._record_released(set(gangs), by_name, by_id, completed, now, stats)
        except SlurmError as exc:
            stats.errors.append(str(exc))
        return stats

    def _cancel_orphan(self, sj: SlurmJob, now: datetime) -> None:
        """A platform job Slurm runs that the platform no longer lists (its stop's deadline passed, the cycle
        released its tasks). When this backend already sent it the stop's SIGTERM, the end is SIGKILL now
        (`_kill`), as at the deadline: a plain scancel would TERM it a second time and KILL only KillWait later
        (trial 19, F3). Otherwise `scancel` (Slurm's TERM, KillWait, KILL)."""
        job_id, attempt = parse_job_name(sj.name)
        row = Job.objects.filter(pk=job_id).values_list("slurm", flat=True).first() or {}
        mine = row.get("attempt") == attempt and row.get("job_id") == sj.job_id
        if mine and row.get("term_at") and not row.get("kill_at"):
            self._save(job_id, {**row, "kill_at": now.isoformat()})
            self._kill(sj.job_id, sj)
        else:
            self.cli.cancel(sj.job_id)

    def _kill(self, slurm_id: str, sj: SlurmJob | None) -> None:
        """The stop's deadline: SIGKILL every process of the job's step (of each component's: a het job) at once,
        then `scancel` ends the job (its batch shell; Slurm's process tracking removes what is left). A step
        that is not there (not started, already over) is no error: the cancel remains."""
        for part in (sj.components if sj is not None and sj.components else [sj]):
            try:
                self.cli.kill_step(part.job_id if part is not None else slurm_id)
            except SlurmError as exc:
                log.info("slurm: KILL to the step of job %s: %s", slurm_id, exc)
        self.cli.cancel(slurm_id)

    RELEASED_LOOKBACK = timedelta(days=1)

    def _record_released(self, listed: set, by_name, by_id, completed, now, stats: RoundStats) -> None:
        """Tasks the platform released before Slurm's job ended (a stop whose deadline passed: a time limit, a
        cancel) keep no exit information unless it is read here once their Slurm job has ended (trial 19,
        F11): the launcher's exit file when it wrote one, else -- the launcher outlives a SIGTERM, so only a
        SIGKILL ends it without its file -- SIGKILL after Slurm's own end of the job (CANCELLED, TIMEOUT), or
        "lost" with Slurm's state. Reported through report_task_event, which keeps it on a released task
        once and changes nothing else."""
        rows = list(Task.objects.filter(
            state=Task.State.RELEASED, exit_code__isnull=True, exit_signal__isnull=True, end_message="",
            node__executor=Node.Executor.SLURM, job__simulated=False, job__slurm_job_id__gt="",
            job__finished_at__gte=now - self.RELEASED_LOOKBACK).exclude(job_id__in=listed)
            .values("id", "job_id", "node_id", "job__attempts", "job__slurm", "started_at"))
        if not rows:
            return
        nodes = {n.pk: n for n in Node.objects.filter(pk__in={r["node_id"] for r in rows})}
        for r in rows:
            record = r["job__slurm"] or {}
            attempt = r["job__attempts"]
            if record.get("attempt") != attempt or not record.get("job_id") or r["node_id"] not in nodes:
                continue
            sid = record["job_id"]
            sj = by_name.get(job_name(r["job_id"], attempt)) or by_id.get(sid)
            if sj is not None and sj.job_id != sid:
                sj = by_id.get(sid)
            comp = completed.get(sid) if sj is None else None
            if sj is not None and not sj.ended:
                continue  # still running or completing: its files are not final yet
            state = sj.state if sj is not None else (comp or {}).get("JobState", "GONE")
            d = Path(record.get("dir") or self._dir(r["job_id"], attempt))
            t = {"task": r["id"], "attempt": attempt}
            kind, _, value = _read_text(d / f"task-{r['id']}.exit").partition(" ")
            exit_code = (comp or {}).get("ExitCode") or ""
            slurm_said = f"Slurm job {sid} {state}" + (f", ExitCode {exit_code}" if exit_code else "")
            if kind == "signal" and value.isdigit():
                self._report(nodes[r["node_id"]], t, "exited", stats, signal=int(value))
            elif kind == "exit" and value.lstrip("-").isdigit():
                self._report(nodes[r["node_id"]], t, "exited", stats, exit_code=int(value) & 255)
            elif r["started_at"] is None and not (d / f"task-{r['id']}.started").exists():
                self._report(nodes[r["node_id"]], t, "lost", stats, message=NEVER_STARTED)
            elif state in ("CANCELLED", "TIMEOUT") or (state == "FAILED" and record.get("kill_at")):
                how = "at the stop deadline" if record.get("kill_at") else "by Slurm"
                self._report(nodes[r["node_id"]], t, "exited", stats, signal=9,
                             message=f"was killed by signal 9 (SIGKILL) {how} ({slurm_said})")
            else:
                self._report(nodes[r["node_id"]], t, "lost", stats, message=f"{slurm_said}; no exit status")

    def _jobcomp(self) -> dict:
        if not self.jobcomp_file:
            return {}
        try:
            return parse_jobcomp(Path(self.jobcomp_file).read_text(errors="replace"))
        except OSError:
            return {}

    def _gangs(self, now: datetime) -> dict[int, list[tuple]]:
        """{job id: [(node, assignment task), ...] in rank order} over every Slurm node."""
        gangs: dict[int, list[tuple]] = defaultdict(list)
        busy = Task.objects.filter(state__in=Task.ON_NODE_STATES, node__executor=Node.Executor.SLURM,
                                   job__simulated=False).values("node_id")
        nodes = {n.pk: n for n in Node.objects.filter(executor=Node.Executor.SLURM, pk__in=busy).order_by("name")}
        for node_id, answer in nodes_assignments(list(nodes.values()), now).items():
            for t in answer["tasks"]:
                gangs[t["job"]].append((nodes[node_id], t))
        for tasks in gangs.values():
            tasks.sort(key=lambda nt: int(nt[1]["env"]["RANK"]))
        return dict(gangs)

    # -- one gang ----------------------------------------------------------------------------------------------
    JOB_FIELDS = ("id", "slurm_job_id", "slurm", "time_limit_seconds", "queue__preemption_grace_seconds", "state", "name")

    def _drive(self, job_id: int, attempt: int, tasks, by_name, by_id, completed, now, stats: RoundStats,
               row: dict | None = None) -> None:
        if row is None:
            row = Job.objects.filter(pk=job_id).values(*self.JOB_FIELDS).first()
        record = row["slurm"] if (row["slurm"] or {}).get("attempt") == attempt else {}
        refusals = record.get("sbatch_refusals", 0)
        record = record if record.get("job_id") else {}  # a record of refused submissions only: not submitted
        name = job_name(job_id, attempt)
        sj = by_name.get(name) or by_id.get(record.get("job_id", ""))
        if sj is not None and not record:  # submitted, but the record was lost (backend stopped in between)
            record = self._save(job_id, {"attempt": attempt, "job_id": sj.job_id, "submitted_at": now.isoformat(),
                                         "dir": str(self._dir(job_id, attempt)), "adopted": True})
        stopping = all(t["action"] == "stop" for _, t in tasks)
        if not record:
            if stopping:
                for node, t in tasks:
                    self._report(node, t, "lost", stats, message=NEVER_STARTED)
                return
            try:
                self._submit(job_id, attempt, tasks, row, now, stats)
            except SlurmError as exc:
                self._refused(job_id, attempt, tasks, refusals + 1, str(exc), now, stats)
                raise
            return
        d = Path(record["dir"])
        comp = completed.get(record["job_id"]) if sj is None else None
        state = sj.state if sj is not None else (comp or {}).get("JobState", "")
        if state == "PENDING":
            if stopping:
                self.cli.cancel(record["job_id"])
                for node, t in tasks:
                    self._report(node, t, "lost", stats, message=NEVER_STARTED)
                return
            submitted = datetime.fromisoformat(record["submitted_at"])
            if (now - submitted).total_seconds() >= self.start_timeout:
                self._start_timeout(job_id, record, sj, now, stats)
            return
        if sj is not None and sj.node_list and sj.state not in ("PENDING", "CONFIGURING") and "gpus" not in record:
            self._record_placement(job_id, attempt, record, sj, tasks, now)
        # started, output, exits: from the launchers' files
        pending_exits = []
        for node, t in tasks:
            task_id = t["task"]
            started = d / f"task-{task_id}.started"
            if self._task_state(task_id) == Task.State.BOUND and (started.exists() or state == "RUNNING"):
                pid = _read_int(started)
                self._report(node, t, "started", stats, pid=pid)
            self._ship_log(node, t, d, stats)
            exit_file = d / f"task-{task_id}.exit"
            if exit_file.exists():
                pending_exits.append((exit_file.stat().st_mtime_ns, node, t, exit_file))
        for _, node, t, exit_file in sorted(pending_exits, key=lambda x: x[0]):
            kind, _, value = exit_file.read_text().strip().partition(" ")
            if kind == "signal":
                self._report(node, t, "exited", stats, signal=int(value))
            else:
                self._report(node, t, "exited", stats, exit_code=int(value or 0) & 255)
        ended = sj.ended if sj is not None else True  # squeue keeps ended jobs MinJobAge; after that: jobcomp or gone
        if ended:
            self._ended(job_id, record, sj, comp, tasks, now, stats)
            return
        # stops: TERM at once, KILL at the deadline (the assignments read again: a report above may have stopped it)
        if pending_exits:
            nodes = {node.pk: node for node, _ in tasks}.values()
            tasks = [(node, t) for node in nodes for t in node_assignments(node, now)["tasks"] if t["job"] == job_id]
            stopping = bool(tasks) and all(t["action"] == "stop" for _, t in tasks)
        stops = [t for _, t in tasks if t["action"] == "stop"]
        if stops and stopping and (sj is None or sj.state != "COMPLETING"):
            deadline = min(datetime.fromisoformat(t["stop_deadline"]) for t in stops if t["stop_deadline"])
            if not record.get("term_at"):
                try:
                    self.cli.signal(record["job_id"], "TERM")
                except SlurmError as exc:  # no step running (yet, or any more): the KILL at the deadline remains
                    log.info("slurm: TERM to job %s: %s", record["job_id"], exc)
                record = self._save(job_id, {**record, "term_at": now.isoformat()})
                stats.signalled.append(job_id)
            if now >= deadline and not record.get("kill_at"):
                self._kill(record["job_id"], sj)
                record = self._save(job_id, {**record, "kill_at": now.isoformat()})
                stats.killed.append(job_id)

    def _task_state(self, task_id: int) -> str:
        return Task.objects.filter(pk=task_id).values_list("state", flat=True).first()

    def _dir(self, job_id: int, attempt: int) -> Path:
        return self.output_dir / f"job-{job_id}" / f"attempt-{attempt}"

    def _save(self, job_id: int, record: dict) -> dict:
        Job.objects.filter(pk=job_id).update(slurm=record, slurm_job_id=record.get("job_id", ""))
        return record

    def _report(self, node, t, event: str, stats: RoundStats, **kw) -> bool:
        ok, detail = report_task_event(node, task_id=t["task"], attempt=t["attempt"], event=event, at=self._now, **kw)
        if ok:
            if event == "started":
                stats.started += 1
            elif event == "exited":
                stats.exited += 1
            else:
                stats.lost += 1
        elif detail and "already ended" not in detail and "not bound" not in detail:
            log.info("slurm: %s of task %s refused: %s", event, t["task"], detail)
        return ok

    def _submit(self, job_id: int, attempt: int, tasks, row, now, stats: RoundStats) -> None:
        d = self._dir(job_id, attempt)
        gang = [GangTask(task=t["task"], node=node.name, argv=tuple(t["argv"]), env=t["env"],
                         working_dir=t["working_dir"], gpus=len(t["gpus"])) for node, t in tasks]
        addresses = {node.name: node.address or node.name for node, _ in tasks}
        grace = float(row["queue__preemption_grace_seconds"] or 0)
        scripts = build_job(gang, job_id=job_id, attempt=attempt, output_dir=str(d), partition=self.cli.partition,
                            master_port=master_port(job_id, attempt), time_limit_seconds=row["time_limit_seconds"],
                            grace_seconds=grace, addresses=addresses, mode=self.mode)
        d.mkdir(parents=True, exist_ok=True)
        (d / "launch.sh").write_text(scripts.launch)
        (d / "batch.sh").write_text(scripts.batch)
        slurm_id = self.cli.submit(scripts.batch)
        # written with the round's other submissions in one transaction (_flush_submissions): a backend that
        # dies before that commit finds these Slurm jobs by name next time (adoption in _drive)
        self._submitted.append((job_id, {"attempt": attempt, "job_id": slurm_id, "submitted_at": now.isoformat(),
                                         "dir": str(d), "mode": self.mode}, {
            "time": now, "kind": "slurm_submitted", "job_id": job_id,
            "message": f"{row['name']}: Slurm job {slurm_id} submitted ({self.mode} mode, {scripts.describe()})",
            "data": {"slurm_job_id": slurm_id, "attempt": attempt, "nodes": scripts.nodes, "mode": self.mode,
                     "components": [{"nodes": list(c.nodes), "tasks_per_node": c.tasks_per_node,
                                     "gpus_per_node": c.gpus_per_node} for c in scripts.components]}}))
        stats.submitted.append(job_id)

    def _refused(self, job_id: int, attempt: int, tasks, refusals: int, why: str, now, stats: RoundStats) -> None:
        """sbatch failed. Counted per attempt (Job.slurm["sbatch_refusals"]); at SBATCH_REFUSALS the gang
        fails with sbatch's words (a submission Slurm keeps refusing will not start by retrying forever)."""
        Job.objects.filter(pk=job_id).update(slurm={"attempt": attempt, "sbatch_refusals": refusals,
                                                    "last_refusal": why[:300]})
        if refusals < SBATCH_REFUSALS:
            return
        message = f"Slurm refused the job {refusals} times: {why}"
        with transaction.atomic():
            stop_job(job_id, at=now, target="failed", kind="slurm_refused", reason=message[:300])
            for node, t in tasks:
                self._report(node, t, "lost", stats, message=message[:200])

    def _flush_submissions(self) -> None:
        """The round's Slurm job records and their `slurm_submitted` Events, in one transaction."""
        if not self._submitted:
            return
        with transaction.atomic():
            for job_id, record, _ in self._submitted:
                self._save(job_id, record)
            record_events([event for _, _, event in self._submitted])
        self._submitted = []

    def _start_timeout(self, job_id: int, record: dict, sj: SlurmJob | None, now, stats: RoundStats) -> None:
        why = (sj.reason if sj is not None else "") or "no reason given"
        try:
            self.cli.cancel(record["job_id"])
        except SlurmError as exc:
            log.warning("slurm: cancel of %s failed: %s", record["job_id"], exc)
        reason = (f"Slurm did not start job {record['job_id']} within {self.start_timeout:.0f} s "
                  f"(SLURM_START_TIMEOUT); Slurm's reason: {why}")
        with transaction.atomic():
            if requeue_job(job_id, at=now, kind="requeued", reason=reason, backoff=True,
                           data={"slurm_job_id": record["job_id"], "slurm_reason": why}):
                record_event("slurm_start_timeout", reason, job_id=job_id, time=now,
                             data={"slurm_job_id": record["job_id"], "slurm_reason": why})
                stats.requeued.append(job_id)

    def _record_placement(self, job_id: int, attempt: int, record: dict, sj: SlurmJob, tasks, now) -> None:
        """Slurm's choice of GPU indices (squeue's gres_detail; and in admission mode, of nodes) becomes the
        tasks' allocations, so the map and the allocation stay true; an Event records what changed. A het
        job is read component by component (script.layout: the same components, in the same order, as
        submitted; a task's GPUs are its slice of its component's GPUs on its node)."""
        by_task = {t["task"]: (node, t) for node, t in tasks}
        comps = layout([GangTask(task=t["task"], node=node.name, argv=(), env={}, working_dir="", gpus=len(t["gpus"]))
                        for node, t in tasks])
        parts = sj.components or [sj]
        changes, moves = [], []
        with transaction.atomic():
            lock_jobs([job_id])  # the job row first, then its tasks and allocations (the house's lock order)
            for comp in comps:
                part = parts[comp.index] if comp.index < len(parts) else sj
                for slot, i, _local, offset in comp.slots:
                    node, t = by_task[slot.task]
                    if self.mode == "admission" and i < len(part.node_list):
                        target_name = part.node_list[i]  # Slurm's i-th node of the component holds its i-th block
                    else:
                        target_name = node.name
                    indices = part.gpus.get(target_name, [])
                    g = len(t["gpus"])
                    current = sorted(x["index"] for x in t["gpus"])
                    # Slurm's indices; when it no longer says (an ended job's gres_detail is empty), the planned ones
                    mine = (indices[offset:offset + g] if len(indices) >= offset + g else current) if g else []
                    if target_name == node.name and (not mine or sorted(mine) == current):
                        continue
                    target = Node.objects.filter(name=target_name).first()
                    if target is not None:
                        moves.append((t, target, mine))
            # every move at once: a task may take GPUs another task of the gang is leaving (Slurm swapped them).
            # A move is refused while a GPU it wants is held by a task that stays (another job's, or one of
            # this gang whose own move was refused: repeated until no refusal frees anything)
            ids = {t["task"]: list(Gpu.objects.filter(node=target, index__in=mine).values_list("id", flat=True))
                   if mine else [] for t, target, mine in moves}
            ok = [(t, target, mine) for t, target, mine in moves if len(ids[t["task"]]) == len(mine)]
            while True:
                moving = [t["task"] for t, _, _ in ok]
                live = Allocation.objects.filter(released_at__isnull=True).exclude(task_id__in=moving)
                keep = [m for m in ok if not live.filter(gpu_id__in=ids[m[0]["task"]]).exists()]
                if len(keep) == len(ok):
                    break
                ok = keep
            done = {t["task"] for t, _, _ in ok}
            changes += [{"task": t["task"], "node": target.name, "gpus": mine, "recorded": False}
                        for t, target, mine in moves if t["task"] not in done]
            Allocation.objects.filter(task_id__in=[t["task"] for t, _, _ in ok], released_at__isnull=True).delete()
            write_allocations([(t["task"], gid, job_id, now, 0, 0, None) for t, _, _ in ok for gid in ids[t["task"]]])
            for t, target, mine in ok:
                Task.objects.filter(pk=t["task"]).update(node=target)
                check_nodes([target.pk])  # task.node_id (migration 0024_e2e10)
                changes.append({"task": t["task"], "node": target.name, "gpus": mine, "recorded": True})
            self._save(job_id, {**record, "gpus": sj.gpus, "nodes": sj.node_list})
            if changes:
                record_event("slurm_placement", f"Slurm job {sj.job_id} placed tasks differently from the plan: "
                             + "; ".join(f"task {c['task']} on {c['node']} GPUs {c['gpus']}"
                                         + ("" if c["recorded"] else " (not recorded: held by another task)")
                                         for c in changes), job_id=job_id, time=now,
                             data={"slurm_job_id": sj.job_id, "changes": changes})

    def _ship_log(self, node, t, d: Path, stats: RoundStats) -> None:
        path = d / f"task-{t['task']}.out"
        try:
            size = path.stat().st_size
        except OSError:
            return
        stored = (TaskLog.objects.filter(task_id=t["task"], attempt=t["attempt"])
                  .aggregate(end=Max(F("offset") + F("size")))["end"] or 0)
        if size <= stored:
            return
        with open(path, "rb") as f:
            f.seek(stored)
            raw = f.read(LOG_CHUNK)
        if len(raw) == LOG_CHUNK:
            # never split a UTF-8 character: its rest comes with the next chunk (a chunk of only a broken tail is
            # sent as it is, each byte a "?")
            raw = trim_utf8_tail(raw) or raw
        # the node agent's byte rule (agent.executor.decode_output): each byte that is not part of a UTF-8
        # character, and NUL, one "?", so the stored offsets count the file's bytes and the valid text around a bad
        # byte is kept
        ok, _, _ = append_log(node, task_id=t["task"], attempt=t["attempt"], offset=stored, data=decode_output(raw),
                              at=self._now)
        if ok:
            stats.log_bytes += len(raw)

    def _ended(self, job_id: int, record: dict, sj: SlurmJob | None, comp: dict | None, tasks, now,
               stats: RoundStats) -> None:
        """The Slurm job is over: every task not reported yet is reported from Slurm's state."""
        left = [(node, t) for node, t in tasks if self._task_state(t["task"]) in Task.ON_NODE_STATES]
        if not left:
            return
        state = sj.state if sj is not None else (comp or {}).get("JobState", "GONE")
        reason = sj.reason if sj is not None else ""
        sid = record["job_id"]
        with transaction.atomic():
            if state == "TIMEOUT":
                stop_job(job_id, at=now, target="failed", kind="time_limit",
                         reason=f"time limit: Slurm ended job {sid} at its --time (TIMEOUT)")
                kw = {"signal": 9, "message": f"Slurm job {sid} TIMEOUT"}
            elif state == "NODE_FAIL":
                # a node failure, recorded as the agents' failure detection records a lost node
                # (scheduling/failures.py): requeued whole at once, kind requeued_after_failure, reason "node lost:
                # N task(s) failed on <node>" (the attempt is a failure, diagnosed platform:node_lost), whatever
                # stop the job was in (the drain of its down node, synced first, evicts it as a preemption:
                # trial 19, F10)
                lost = self._lost_nodes(sj, comp, tasks)
                on_lost = [(n, t) for n, t in tasks if n.name in lost] or list(tasks)
                why = (f"Slurm job {sid} NODE_FAIL: node {', '.join(lost)} lost ({reason or 'no reason'}); the gang "
                       "is requeued whole")
                record_event("node_failed", why, job_id=job_id, time=now,
                             node=Node.objects.filter(name=lost[0]).first() if len(lost) == 1 else None,
                             data={"slurm_job_id": sid, "nodes": lost})
                failed = [[t.get("role", ""), t.get("index"), n.name] for n, t in on_lost]
                if requeue_job(job_id, at=now, kind="requeued_after_failure", backoff=True,
                               reason=f"node lost: {len(on_lost)} task(s) failed on {', '.join(lost)}",
                               data={"failed_tasks": failed, "cause": "node lost", "slurm_job_id": sid}):
                    stats.requeued.append(job_id)
                return
            elif state == "PREEMPTED":
                # Slurm's own preemption (a higher-priority Slurm job, a QOS): the same as a preemption by the
                # platform -- the gang is requeued whole, no restart used, no backoff
                why = f"Slurm job {sid} PREEMPTED ({reason or 'no reason'}): the gang is requeued whole"
                if not stop_job(job_id, at=now, target="requeue", kind="preempted", reason=why):
                    record_event("preempted", why, job_id=job_id, time=now, data={"slurm_job_id": sid})
                kw = {"message": f"Slurm job {sid} PREEMPTED"}
            elif state == "BOOT_FAIL":
                # a node of the allocation failed to boot: a node failure -- requeued whole like NODE_FAIL, and
                # the nodes are not ready here with Slurm's reason (sync_nodes keeps them so, see there)
                nodes = _job_nodes(sj, comp, tasks)
                why = (f"Slurm job {sid} BOOT_FAIL: node {','.join(nodes)} failed to boot ({reason or 'no reason'}); "
                       "the gang is requeued whole")
                if not stop_job(job_id, at=now, target="requeue", kind="node_failed", reason=why):
                    record_event("node_failed", why, job_id=job_id, time=now, data={"slurm_job_id": sid})
                self._boot_failed(nodes, f"{BOOT_FAIL}job {sid}" + (f", {reason}" if reason else ""), now)
                kw = {"message": f"Slurm job {sid} BOOT_FAIL: node failed to boot"}
            elif state == "OUT_OF_MEMORY":
                kw = {"message": f"host out of memory: Slurm job {sid} OUT_OF_MEMORY"}
            elif state in ("CANCELLED", "FAILED") and record.get("kill_at"):
                # the deadline KILLs the step before it cancels the job (_kill): the batch script may end first, its
                # srun failed by the KILL, and Slurm's job reads FAILED (seen under load in CI), not CANCELLED
                kw = {"signal": 9, "message": "killed at the stop deadline"}
            elif state == "CANCELLED" and record.get("term_at"):
                kw = {"signal": 15, "message": "stopped (scancel --signal=TERM)"}
            elif state == "GONE":
                kw = {"message": f"Slurm no longer knows job {sid} and left no exit status"}
            else:
                detail = f", exit code {sj.exit_code}" if sj is not None and sj.exit_code else ""
                kw = {"message": f"Slurm job {sid} ended {state} ({reason or 'no reason'}{detail})"}
            for node, t in left:
                event = "exited" if "signal" in kw else "lost"
                self._report(node, t, event, stats, **kw)

    def _lost_nodes(self, sj: SlurmJob | None, comp: dict | None, tasks) -> list[str]:
        """The nodes of a NODE_FAIL job that Slurm has down or not responding (this round's sinfo), in name
        order; all of the job's nodes when Slurm no longer says which."""
        nodes = _job_nodes(sj, comp, tasks)
        bad = {n.name for n in self._slurm_nodes if n.down or "NOT_RESPONDING" in n.flags}
        return sorted(set(nodes) & bad) or sorted(set(nodes))

    # -- nodes -------------------------------------------------------------------------------------------------
    def _boot_failed(self, names, reason: str, now) -> None:
        """Nodes a Slurm job ended BOOT_FAIL on go not_ready here (node_states.transition, an Event) with
        health_reason = `reason` ("Slurm: BOOT_FAIL ..."). They stay not ready -- no heartbeat from sync_nodes --
        until Slurm has had them down or drained and then back in service (or an admin readies them)."""
        from ..services import node_states

        for node in Node.objects.filter(name__in=list(names), executor=Node.Executor.SLURM):
            if node.state == Node.State.NOT_READY:
                continue
            if node_states.transition(node, Node.State.NOT_READY, reason=reason, at=now):
                Node.objects.filter(pk=node.pk).update(health_reason=reason[:300], health_since=now)

    def sync_nodes(self, now: datetime) -> dict:
        """Slurm's nodes of the partition -> platform nodes (executor slurm), and drains both ways (module
        docstring). Returns {"created": [...], "drained_here": [...], "drained_in_slurm": [...], "resumed": [...]}."""
        from ..services.nodes import drain_node, record_heartbeat, register_node, uncordon_node

        out = {"created": [], "drained_here": [], "drained_in_slurm": [], "resumed": [], "readied": []}
        self._slurm_nodes = self.cli.nodes()
        for sn in self._slurm_nodes:
            node = Node.objects.filter(name=sn.name).first()
            created = node is None
            if node is None:
                node = register_node(sn.name, flavor=self.flavor, gpus=[{"index": i} for i in range(sn.gpus)],
                                     cpu_milli=sn.cpus * 1000, memory_mib=sn.memory_mib, executor="slurm",
                                     address=sn.address or None, labels={"slurm_partition": self.cli.partition})
                out["created"].append(sn.name)
            elif node.executor != Node.Executor.SLURM:
                continue  # a node of the partition the platform runs another way: left alone
            boot_failed = node.state == Node.State.NOT_READY and node.health_reason.startswith(BOOT_FAIL)
            if boot_failed and (sn.down or sn.drained):  # Slurm took it out: its return to service readies it here
                Node.objects.filter(pk=node.pk).update(
                    health_reason=f"{THEIRS}{sn.reason or ('node down' if sn.down else 'drained')}"[:300])
                node.health_reason = THEIRS
            elif boot_failed:
                continue
            if not sn.down and (created or node.last_heartbeat is None or (now - node.last_heartbeat).total_seconds() >= 5):
                # Slurm answers for its node's liveness: the platform's missed-heartbeat detector stays quiet while
                # Slurm has it up, and marks it not_ready when Slurm has it down (no heartbeat any more). A node just
                # created is stamped with the round's time too (register_node stamps the wall clock, which a round
                # given an explicit `now` -- tests, a replay -- must not be compared with)
                was_not_ready = node.state == Node.State.NOT_READY
                node = record_heartbeat(sn.name, gpus=[], at=now)
                if was_not_ready and node.state != Node.State.NOT_READY and node.health_reason.startswith(THEIRS) \
                        and node.state == Node.State.READY:
                    Node.objects.filter(pk=node.pk).update(health_reason="", health_since=None)
                    node.health_reason = ""
            slurm_out = sn.drained or sn.down
            slurm_reason = sn.reason or ("node down" if sn.down else "drained")
            ours = slurm_reason.startswith(OURS.strip())
            if slurm_out and not ours and node.state == Node.State.READY:
                drain_node(node, reason=f"{THEIRS}{slurm_reason}", at=now)  # its reason and time kept by drain_node
                out["drained_here"].append(sn.name)
            elif not slurm_out and node.state in (Node.State.CORDONED, Node.State.DRAINING) \
                    and node.health_reason.startswith(THEIRS):
                uncordon_node(node, reason="Slurm: node is back in service")  # clears the reason and time
                out["readied"].append(sn.name)
            elif node.state in (Node.State.CORDONED, Node.State.DRAINING) and not node.health_reason.startswith(THEIRS) \
                    and not sn.drained:
                self.cli.drain(sn.name, f"{OURS}{node.state} here")
                out["drained_in_slurm"].append(sn.name)
            elif node.state == Node.State.READY and sn.drained and ours:
                self.cli.resume(sn.name)
                out["resumed"].append(sn.name)
        out["topology"] = self.sync_topology(now)
        return out

    def sync_topology(self, now: datetime) -> list[str]:
        """The Slurm cluster's own topology file (`topology_conf`: topology.conf, tree or block plugin; a
        name ending .yaml/.yml is Slurm 24's topology.yaml) -> the platform's domain tree, through the same
        importer and service as `manage.py import_topology --format slurm-conf` (clusterspec.importers.topology,
        services.apply_topology; nodes it names that the platform lacks -- other partitions -- are skipped,
        domains it lacks are kept). Applied only when it would change something (one `topology_applied`
        Event). Returns the applied plan's lines ([] when nothing changed). A file that cannot be read or is
        malformed changes nothing: logged, one `slurm_topology_refused` Event per distinct content."""
        if not self.topology_conf:
            return []
        from clusterspec.importers.errors import ImportFormatError
        from clusterspec.importers.topology import parse_topology_file

        from ..services import ValidationError, apply_topology, plan_topology

        path = self.topology_conf
        fmt = "slurm-yaml" if path.endswith((".yaml", ".yml")) else "slurm-conf"
        try:
            text = Path(path).read_text(encoding="utf-8")
            spec = parse_topology_file(path, fmt)
            plan = plan_topology(spec)
            if not (plan.create or plan.retier or plan.move or plan.reattach):  # domains it lacks are kept
                return []
            plan = apply_topology(spec, skip_unknown_nodes=True)
        except (OSError, ImportFormatError, ValidationError) as exc:
            key = f"{type(exc).__name__}: {exc}"
            if key != self._topology_refused:
                self._topology_refused = key
                log.warning("slurm: topology %s not applied: %s", path, exc)
                record_event("slurm_topology_refused", f"Slurm topology {path} not applied: {exc}"[:500], time=now,
                             data={"file": path, "error": str(exc)[:500]})
            return []
        self._topology_refused = None
        return plan.lines()


def _job_nodes(sj: SlurmJob | None, comp: dict | None, tasks) -> list[str]:
    """An ended Slurm job's nodes: squeue's node list, else the completion record's NodeList, else the nodes of
    its tasks here (`tasks`: (Node, task) pairs), in name order there."""
    if sj is not None and sj.node_list:
        return sj.node_list
    return expand_hostlist((comp or {}).get("NodeList", "")) or sorted({n.name for n, _ in tasks})


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
