"""The replay's books: every count, GPU-second and wait the report gives, kept as events happen, and the
ReplayReport filled from them when the replay ends (`Ledger.close`).

The replay (scheduler.sim.replay.Replay) decides what happened; the ledger only records it:

- allocated GPU-seconds: the integral of GPUs held by jobs over simulated time (`advance`);
- useful GPU-seconds (work that counts towards completion) and waste by cause (`credit`, `waste`):
  lost_work (since the last checkpoint of a failed attempt), undetected (held by a failed job until
  detection), checkpoint (stalls), grace (eviction grace periods); `other` is what remains at the end;
- per team GPU-seconds (`account`), first-start waits by size bucket and topology alignment (`started`),
  counts of finishes, requeues, restarts, evictions and rejections, and per cycle the fragmentation rate
  (time-weighted) and the engine / snapshot / apply wall times.

Units: seconds of simulated time and GPUs; wall times in milliseconds; the report converts to GPU-hours.
"""
from __future__ import annotations

from dataclasses import asdict

from scheduler.core import gpu_hours
from scheduler.sim.failures import Checkpointing
from scheduler.sim.report import SIZE_BUCKETS, ReplayReport, lowest_feasible_tier, queueing_summary, size_bucket


class Ledger:
    """The books of one replay that starts at `start` (seconds). `report` is the ReplayReport being built
    (its header already set); `team_of`: queue name -> team name; `tier_capacity`: report.tier_capacity
    (the most GPUs one domain of each tier holds)."""

    def __init__(self, report: ReplayReport, *, start: float, team_of: dict[str, str], checkpoint: Checkpointing,
                 tier_capacity: dict[int, int]):
        self.report, self.start, self.team_of, self.ckpt = report, start, team_of, checkpoint
        self.tier_capacity = tier_capacity
        self.clock = start  # time up to which the allocated GPU-seconds are counted
        self.gpu_seconds = 0.0  # allocated GPU-seconds
        self.useful = 0.0  # GPU-seconds of work that counts towards completion
        self.waste = {"lost_work": 0.0, "undetected": 0.0, "checkpoint": 0.0, "grace": 0.0}  # GPU-seconds
        self.team_seconds: dict[str, float] = {}
        self.waits: dict[str, list[float]] = {}  # size bucket -> first-start waits, seconds
        self.frag_integral, self.frag_span, self.frag_now, self.frag_since = 0.0, 0.0, None, start
        self.engine_ms: list[float] = []
        self.snapshot_ms = self.apply_ms = 0.0
        self.node_failures = self.node_failures_hitting_jobs = 0
        self.interruptions: list[dict] = []  # one record per job hit by a node failure (replay.failure_summary)
        # the GPU-hour ledger's spans (scheduler.core.gpu_hours): attempts' use, and per-instant state
        self.spans: list[gpu_hours.Span] = []
        self._instant: dict[str, list] = {}  # bucket -> [since, gpus] of the open per-instant span

    # -- GPU-seconds ------------------------------------------------------------------------------
    def advance(self, to: float, used_gpus: int, *, down: float = 0, held: float = 0, waiting: bool = False) -> None:
        """`used_gpus` GPUs were held from the last time counted until `to` (seconds); over that time `down`
        GPUs of failed nodes were unallocated, `held` GPUs were held for pending gangs, and `waiting` says
        whether a job was pending (spans of the GPU-hour ledger)."""
        if to > self.clock:
            self.gpu_seconds += used_gpus * (to - self.clock)
            for bucket, value in (("down", down), ("held", held), ("waiting", 1 if waiting else 0)):
                self._level(bucket, value, self.clock)
            self.clock = to

    def _level(self, bucket: str, value: float, at: float) -> None:
        """The per-instant `bucket` is `value` from `at` on (coalesced: a span closes when the value changes)."""
        cur = self._instant.get(bucket)
        if cur is not None and cur[1] == value:
            return
        if cur is not None and cur[1] and at > cur[0]:
            self.spans.append(gpu_hours.Span(cur[0], at, cur[1], bucket))
        self._instant[bucket] = [at, value]

    def _span(self, start: float, end: float, gpus: float, bucket: str) -> None:
        if end > start and gpus > 0:
            self.spans.append(gpu_hours.Span(start, end, gpus, bucket))

    def account(self, job, gpus: int, end: float) -> None:
        """`gpus` GPUs of `job` (a JobInfo with start_time) are released at `end`: its team's GPU-seconds."""
        team = self.team_of.get(job.queue, job.queue)
        self.team_seconds[team] = self.team_seconds.get(team, 0.0) + gpus * (end - job.start_time)

    def credit(self, gpus: int, work: float, elapsed: float, start: float | None = None) -> None:
        """An attempt on `gpus` GPUs that started at `start` ended after `elapsed` s with `work` s of its work
        kept: useful GPU-seconds, and the checkpoint stalls of `elapsed` s (useful first, then the stalls,
        in the GPU-hour ledger's spans; no span when start is None)."""
        stall = self.ckpt.stall(elapsed)
        self.useful += gpus * work
        self.waste["checkpoint"] += gpus * stall
        if start is not None:
            self._span(start, start + work, gpus, "useful")
            self._span(start + work, start + work + stall, gpus, "grace_and_startup")

    LOSS_BUCKET = {"lost_work": "lost_to_failure", "undetected": "lost_to_failure", "grace": "grace_and_startup"}

    def lose(self, cause: str, gpu_seconds: float, gpus: int | None = None, end: float | None = None) -> None:
        """GPU-seconds wasted for `cause`: "lost_work", "undetected" or "grace"; with `gpus` and `end`, also a
        ledger span of `gpus` GPUs ending at `end` (lost_work and undetected: lost_to_failure; grace:
        grace_and_startup)."""
        self.waste[cause] += gpu_seconds
        if gpus and end is not None:
            self._span(end - gpu_seconds / gpus, end, gpus, self.LOSS_BUCKET[cause])

    # -- jobs -------------------------------------------------------------------------------------
    def started(self, gpus_requested: int, wait: float, tasks, tier: int) -> None:
        """A job's first start after `wait` s, on `tasks` (TaskPlacements) in a domain of `tier`."""
        report = self.report
        report.jobs_started += 1
        self.waits.setdefault(size_bucket(gpus_requested), []).append(wait)
        nodes = {t.node for t in tasks}
        if len(nodes) > 1:
            report.multi_node_jobs += 1
            lowest = lowest_feasible_tier(self.tier_capacity, sum(len(t.gpus) for t in tasks))
            if lowest is None:
                report.multi_node_beyond_largest_domain += 1
            elif tier == lowest:
                report.multi_node_aligned += 1

    def restarted(self) -> None:
        self.report.restarts += 1

    def finished(self) -> None:
        self.report.jobs_finished += 1

    def requeued(self) -> None:
        self.report.jobs_requeued += 1

    def evicted(self, rule: str) -> None:
        by_rule = self.report.evictions_by_rule
        by_rule[rule] = by_rule.get(rule, 0) + 1

    def withdrawn(self, rule: str) -> None:
        """An eviction counted by `evicted` was taken back in its grace period: it is no eviction."""
        by_rule = self.report.evictions_by_rule
        by_rule[rule] = by_rule.get(rule, 0) - 1
        self.report.evictions_withdrawn += 1

    def rejected(self, code: str, queue: str | None = None) -> None:
        """A job of `queue` was rejected for `code` (the engine's terminal reason): counted by code and by team."""
        report = self.report
        report.jobs_rejected += 1
        report.rejected_by_code[code] = report.rejected_by_code.get(code, 0) + 1
        if queue is not None:
            team = self.team_of.get(queue, queue)
            report.rejected_by_team[team] = report.rejected_by_team.get(team, 0) + 1

    # -- nodes ------------------------------------------------------------------------------------
    def node_failed(self, hit_jobs: bool) -> None:
        self.node_failures += 1
        self.node_failures_hitting_jobs += hit_jobs

    def interrupted(self, record: dict) -> dict:
        """A job hit by a node failure; `record` (job, node, failed, gpus, detected, requeued, restarted)
        is filled in by the replay as the job is detected, requeued and restarted."""
        self.interruptions.append(record)
        return record

    # -- cycles -----------------------------------------------------------------------------------
    def cycle(self, now: float, fragmentation_rate: float | None, snapshot_ms: float, engine_ms: float | None,
              apply_ms: float) -> None:
        """A cycle ran at `now`: the fragmentation rate it reported holds until the next one. engine_ms None: a
        settled cycle (the replay did not call the engine): counted, but not in the per-call timings."""
        if engine_ms is not None:
            self.snapshot_ms += snapshot_ms
            self.engine_ms.append(engine_ms)
            self.apply_ms += apply_ms
        if self.frag_now is not None:
            self.frag_integral += self.frag_now * (now - self.frag_since)
            self.frag_span += now - self.frag_since
        self.frag_now, self.frag_since = fragmentation_rate, now
        self.report.cycles += 1

    # -- the report -------------------------------------------------------------------------------
    def close(self, end: float, *, submitted: int, pending: dict, last_pending: dict, capacity_gpus: int,
              fairness: dict | None, failures: dict | None, wall_seconds: float) -> ReplayReport:
        """Fill the report at `end` (seconds), once every live job was released: submitted jobs, jobs
        still pending (`pending`: job id -> JobInfo) by the code of their last reason (`last_pending`),
        rates, queueing, alignment, usage, goodput and waste, timings. Returns the report."""
        report = self.report
        for bucket in list(self._instant):
            self._level(bucket, 0, max(end, self._instant[bucket][0]))
        capacity = [gpu_hours.Span(self.start, end, capacity_gpus, "capacity")]
        use = [s for s in self.spans if s.bucket != "waiting"]
        waiting = [s for s in self.spans if s.bucket == "waiting"]
        books = gpu_hours.compute(capacity, use, waiting, since=self.start, until=end).totals.get("cluster")
        if books is not None:
            report.gpu_hours = books.hours()
            classified = sum(s.gpus * (s.end - s.start) for s in use if s.bucket not in ("down", "held"))
            report.gpu_hours["allocated_unclassified"] = max(0.0, self.gpu_seconds - classified) / 3600.0
        if self.frag_now is not None and end > self.frag_since:
            self.frag_integral += self.frag_now * (end - self.frag_since)
            self.frag_span += end - self.frag_since
        span = end - self.start
        report.jobs_submitted = submitted
        report.jobs_pending_at_end = len(pending)
        if report.cycles:
            for job_id in pending:
                reason = last_pending.get(job_id)
                code = reason.code if reason is not None else "not_seen_by_engine"
                report.pending_by_code[code] = report.pending_by_code.get(code, 0) + 1
        gpu_seconds = self.gpu_seconds
        report.mean_allocation_rate = gpu_seconds / (capacity_gpus * span) if span > 0 and capacity_gpus else 0.0
        if self.frag_span > 0:
            report.mean_fragmentation_rate = self.frag_integral / self.frag_span
        waits = self.waits
        report.queueing = queueing_summary([w for ws in waits.values() for w in ws])
        report.queueing_by_size = {
            label: queueing_summary(waits[label]) for label, _, _ in SIZE_BUCKETS if label in waits
        }
        feasible = report.multi_node_jobs - report.multi_node_beyond_largest_domain
        report.topology_alignment = report.multi_node_aligned / feasible if feasible else None
        report.team_gpu_hours = {t: s / 3600.0 for t, s in sorted(self.team_seconds.items())}
        report.evictions = sum(report.evictions_by_rule.values())
        report.evictions_per_started_job = report.evictions / report.jobs_started if report.jobs_started else None
        if fairness is not None:
            report.fairness = fairness
        report.allocated_gpu_hours = gpu_seconds / 3600.0
        report.useful_gpu_hours = self.useful / 3600.0
        report.goodput = self.useful / gpu_seconds if gpu_seconds > 0 else None
        report.waste_gpu_hours = {k: v / 3600.0 for k, v in self.waste.items()}
        report.waste_gpu_hours["other"] = (gpu_seconds - self.useful - sum(self.waste.values())) / 3600.0
        report.checkpoint = asdict(self.ckpt)
        if failures is not None:
            report.failures = failures
        report.sim_start, report.sim_end = self.start, end
        report.span_seconds, report.span_days = span, span / 86400.0
        if self.engine_ms:
            report.engine_mean_ms = sum(self.engine_ms) / len(self.engine_ms)
            report.engine_max_ms = max(self.engine_ms)
            report.snapshot_mean_ms = self.snapshot_ms / len(self.engine_ms)
            report.apply_mean_ms = self.apply_ms / len(self.engine_ms)
        report.wall_seconds = wall_seconds
        return report
