"""Replay a real trace on a real cluster in simulated time, with the production engine.

    python manage.py replay --cluster philly --trace philly --until 7 --json /tmp/philly7.json
    python manage.py replay --cluster philly --trace philly --until 14 --compare        # full vs FIFO
    python manage.py replay --cluster philly --trace philly --until 14 --what-if quotas.yaml   # issue #15
    python manage.py replay --cluster philly --trace philly --until 14 --failure-rate 10 \\
        --checkpoint-interval 3600 --detection-timeout 300 --seed 1                      # issue #6
    python manage.py replay --cluster philly --trace ./my_jobs.csv                       # one's own trace

Loads both through the importer registry (clusterspec.importers), runs scheduler.sim.replay and prints
a summary; --json writes the full report (with --compare: {"full": ..., "fifo": ...}; with --what-if FILE:
{variant: ...}, the variants of scheduler/forecast/variants.py: two policies or quota sets side by side on
the same trace). Touches no database, so it works before `migrate`.

Start: the Philly file has ~70 arrivals in its first 19.5 days, so a Philly replay starts at day 20
(DEFAULT_START_DAYS["philly"]), where the busy part begins; --start 0 replays from the first arrival.
--until counts days from the start (above zero); --start, --grace-period and --half-life are zero or more,
--cycle-interval above zero: another value is refused naming the option. Every span has an upper bound too
(options.MAX_DAYS, 3660 days: --until, --start, --half-life; that many seconds for the seconds options;
--time-limit-factor at most 1,000, --compress at least 0.001): new-user trial 14, F1.

Span: the report's "simulated span" and every rate over it (allocation, fragmentation, the GPU-hour ledger) run
from the start (trace day --start, re-based to 0; the cluster is idle until the first arrival) to --until, or
without --until to the last event; `--until 2` is a span of 2 days (new-user trial 13, F14a: it said 1.85 days,
the span then began at the first arrival, 0.15 days after day 20).
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from gpuplatform.management.options import MAX_DAYS, MAX_SECONDS

from scheduler.core.snapshot import CycleConfig
from scheduler.sim.failures import REFERENCE_RATE, Checkpointing, FailureModel
from scheduler.sim.replay import Progress, replay

DAY = 86400.0
# --failure-rate's bound: 100 failures per GPU-day, ~200,000 times Llama 3's rate (REFERENCE_RATE); a node of
# 8 GPUs then fails about every 2 minutes of up-time, and a replay still ends (new-user trial 12, F13)
MAX_FAILURE_RATE = 100_000
DEFAULT_START_DAYS = {"philly": 20.0}  # first day of the trace's busy part; other traces start at 0
POLICIES = {
    "full": CycleConfig(),
    "fifo": CycleConfig(fair_share=False, backfill=False, preemption=False, reclaim=False),
}


def shift_trace(trace, start_days: float):
    """The trace's jobs submitted at or after `start_days`, re-based on it (traces whose importer has no
    start_days option)."""
    start = start_days * DAY
    jobs = tuple(replace(j, submit=j.submit - start) for j in trace.jobs if j.submit >= start)
    return replace(trace, jobs=jobs, notes=(*trace.notes, f"window from day {start_days} (re-based)"))


class Command(BaseCommand):
    help = ("Replay a workload trace on a cluster in simulated time and report allocation, queueing, topology, "
            "per-team fairness and, with injected failures, recovery times and goodput. A Philly replay starts at "
            "day 20 of the trace (the busy part) unless --start says otherwise.")
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="cluster name in the importer registry (philly, openb)")
        parser.add_argument("--trace", required=True,
                            help="trace name in the importer registry (philly, openb), or the path of one's own CSV "
                                 "trace in Philly format (timestamp,duration,num_gpus,gpu_time,cluster: submit time, "
                                 "run seconds, GPUs, GPU-seconds, queue) or openb pod-list format")
        parser.add_argument("--start", type=float, default=None,
                            help="start at this trace day, re-based to 0 (default: 20 for philly, where its busy "
                                 "part begins after ~70 arrivals in 19.5 days; 0 otherwise)")
        parser.add_argument("--until", type=float, default=None,
                            help="stop after this many days of trace time from the start")
        parser.add_argument("--json", dest="json_path", default=None, help="write the full report to this file")
        parser.add_argument("--scale", type=float, default=None, help="cluster scale, passed to the cluster importer")
        parser.add_argument("--compress", type=float, default=None,
                            help="arrival-time compression, passed to the trace importer")
        parser.add_argument("--policy", choices=sorted(POLICIES), default="full",
                            help="full = fair share, backfill, preemption, reclaim (default); fifo = plain FIFO in "
                                 "global submit order, no backfill, no preemption or reclaim")
        parser.add_argument("--compare", action="store_true",
                            help="run both policies on the same input and print them side by side")
        parser.add_argument("--cycle-interval", type=float, default=60.0,
                            help="least simulated seconds between two scheduling cycles (default 60)")
        parser.add_argument("--grace-period", type=float, default=30.0,
                            help="seconds an evicted job keeps its GPUs before they are freed (default 30)")
        parser.add_argument("--time-limit-factor", type=float, default=None,
                            help="jobs declare this many times their duration as time limit (enables backfill "
                                 "reservations); default: no time limits")
        parser.add_argument("--failure-rate", type=float, default=0.0,
                            help=f"inject node failures: per GPU, failures per 1,000 GPU-days (a failure takes the "
                                 f"node down). Llama 3 405B pre-training: {REFERENCE_RATE:.2f}. Default 0: none")
        parser.add_argument("--checkpoint-interval", type=float, default=None,
                            help="jobs checkpoint after every this many seconds of work (default: never)")
        parser.add_argument("--checkpoint-cost", type=float, default=0.0,
                            help="seconds a checkpoint stalls a job (default 0)")
        parser.add_argument("--detection-timeout", type=float, default=300.0,
                            help="seconds from a node failure until it is detected and its jobs released (default 300)")
        parser.add_argument("--repair-time", type=float, default=4 * 3600.0,
                            help="seconds a failed node stays down (default 14400)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the failure streams (default 0)")
        parser.add_argument("--what-if", dest="what_if", default=None, metavar="FILE",
                            help="YAML/JSON file of variants (name -> policy, config, quotas, weights; "
                                 "scheduler/forecast/variants.py): replay each and compare them side by side")
        parser.add_argument("--half-life", type=float, default=None,
                            help="decayed-usage half-life in days for queue order (default 7, Slurm's "
                                 "PriorityDecayHalfLife; 0 = order by live usage only)")
        parser.add_argument("--no-fairness", action="store_true",
                            help="skip the per-cycle fairness measurement (saves a fair-share computation per cycle "
                                 "under --policy fifo)")

    # (option, whether zero is allowed): a span must be a finite number of days or seconds, never negative;
    # --until 0 or -1 replayed nothing and printed an empty report (new-user 8, F11)
    # --time-limit-factor -1 was taken too (new-user trial 10, F22: a negative time limit for every job)
    # --detection-timeout -1 and --repair-time -1 were taken without a failure rate (new-user trial 12, F13)
    SPANS = (("until", False), ("start", True), ("cycle_interval", False), ("grace_period", True),
             ("half_life", True), ("time_limit_factor", False), ("failure_rate", True), ("detection_timeout", True),
             ("repair_time", True), ("checkpoint_interval", False), ("checkpoint_cost", True), ("compress", False))
    # (option -> (least, most, unit)): the upper bound of each span, and the least --compress (new-user trial 14,
    # F1: `--until 1e303` was a traceback, `--until 1e20` a 21-digit span); --failure-rate: check_failure_options
    BOUNDS = {"until": (None, MAX_DAYS, "days"), "start": (None, MAX_DAYS, "days"),
              "half_life": (None, MAX_DAYS, "days"),
              **{name: (None, MAX_SECONDS, f"seconds ({MAX_DAYS} days)") for name in (
                  "cycle_interval", "grace_period", "detection_timeout", "repair_time", "checkpoint_interval",
                  "checkpoint_cost")},
              "time_limit_factor": (None, 1000, "times a job's duration"),
              "compress": (0.001, None, "(arrivals at most 1,000 times slower)")}

    @classmethod
    def check_spans(cls, opts: dict) -> None:
        """CommandError naming the first span option that is not a finite number above zero (or, where
        allowed, zero), or is outside BOUNDS; None (not given) passes."""
        for name, zero_allowed in cls.SPANS:
            value = opts.get(name)
            if value is None:
                continue
            flag = "--" + name.replace("_", "-")
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed):
                rule = "zero or more" if zero_allowed else "above zero"
                raise CommandError(f"{flag} must be a finite number {rule}, got {value:g}")
            least, most, unit = cls.BOUNDS.get(name, (None, None, ""))
            if (least is not None and value < least) or (most is not None and value > most):
                span = f"at least {least:g}" if most is None else f"at most {most:,.0f}"
                raise CommandError(f"{flag} must be {span} {unit}, got {value:g}")

    @staticmethod
    def check_failure_options(opts: dict) -> None:
        """CommandError if --failure-rate is above MAX_FAILURE_RATE (new-user trial 12, F13: --failure-rate 1e9 ran
        for minutes without an end)."""
        if opts.get("failure_rate") is not None and opts["failure_rate"] > MAX_FAILURE_RATE:
            raise CommandError(f"--failure-rate must be at most {MAX_FAILURE_RATE:,} failures per 1,000 GPU-days, "
                               f"got {opts['failure_rate']:g}")

    @staticmethod
    def check_writable(path: str) -> None:
        """CommandError if the --json file cannot be written, checked before the replay runs (new-user trial 12,
        F1: a missing directory or a directory as the path printed a traceback after the whole replay had run)."""
        target = Path(path)
        parent = target.parent
        if target.is_dir():
            raise CommandError(f"--json {path}: cannot write it: it is a directory")
        if not parent.is_dir():
            raise CommandError(f"--json {path}: cannot write it: no such directory {parent}")
        if not os.access(target if target.exists() else parent, os.W_OK):
            raise CommandError(f"--json {path}: cannot write it: permission denied")

    def handle(self, *args, **opts):
        from clusterspec.importers import load_cluster, load_trace, load_trace_file

        self.check_spans(opts)
        self.check_failure_options(opts)
        if opts["json_path"]:
            self.check_writable(opts["json_path"])

        as_file = opts["trace"] not in ("philly", "openb", "openb-default") and (
            "/" in opts["trace"] or opts["trace"].endswith(".csv") or Path(opts["trace"]).exists())
        start_given = opts["start"] is not None
        start = opts["start"] if start_given else DEFAULT_START_DAYS.get(opts["trace"], 0.0)
        opts["start"] = start
        cluster_opts = {} if opts["scale"] is None else {"scale": opts["scale"]}
        trace_opts = {} if opts["compress"] is None else {"compress": opts["compress"]}
        native_start = opts["trace"] == "philly" and not as_file
        if native_start and start:
            trace_opts["start_days"] = start
        try:
            cluster = load_cluster(opts["cluster"], **cluster_opts)
            trace = load_trace_file(opts["trace"], **trace_opts) if as_file else load_trace(opts["trace"], **trace_opts)
        except (KeyError, TypeError, ValueError) as exc:
            raise CommandError(f"cannot load cluster/trace: {exc}") from exc
        if start and not native_start:
            whole = trace
            trace = shift_trace(trace, start)
        elif start and not trace.jobs:
            whole = load_trace(opts["trace"], **{k: v for k, v in trace_opts.items() if k != "start_days"})
        else:
            whole = trace
        if not trace.jobs:
            raise CommandError(self._empty_window(opts["trace"], start, whole, None if start_given else opts["compress"]))
        if opts["until"] is None:
            self.check_horizon(opts["trace"], trace, opts["compress"])
        until = None if opts["until"] is None else opts["until"] * DAY
        past_end = self._past_end(trace, opts["until"])
        try:
            failures = None
            if opts["failure_rate"]:
                failures = FailureModel(opts["failure_rate"], opts["detection_timeout"], opts["repair_time"],
                                        opts["seed"])
            checkpoint = Checkpointing(opts["checkpoint_interval"], opts["checkpoint_cost"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"cluster {cluster.name}: {len(cluster.nodes)} nodes, {cluster.gpus} GPUs; "
                          f"trace {trace.name}: {len(trace.jobs)} jobs from day {start:g}")

        if past_end and (opts["compare"] or opts["what_if"]):  # one report alone prints it among its notes
            self.stderr.write(f"note: {past_end}")
        policies = ["full", "fifo"] if opts["compare"] else [opts["policy"]]
        runs = {p: (cluster, POLICIES[p]) for p in policies}
        if opts["what_if"]:
            runs = self._variants(opts["what_if"], cluster)
            policies = list(runs)
            opts["compare"] = True
        out = {}
        for policy in policies:
            run_cluster, run_config = runs[policy]
            bar, progress = self._progress(trace, until, policy)
            try:
                if opts.get("half_life") is not None:
                    run_config = replace(run_config, usage_half_life=opts["half_life"] * 86400.0 or None)
                report = replay(run_cluster, trace, config=run_config, until=until, start=0.0,
                                cycle_interval=opts["cycle_interval"], grace_period=opts["grace_period"],
                                time_limit_factor=opts["time_limit_factor"], failures=failures,
                                checkpoint=checkpoint, fairness=not opts["no_fairness"], progress=progress)
            finally:
                if bar is not None:
                    bar.close()
            data = report.to_dict()
            data["policy"] = policy
            data["options"] = {k: opts[k] for k in (
                "cluster", "trace", "start", "until", "scale", "compress", "cycle_interval", "grace_period",
                "time_limit_factor", "failure_rate", "checkpoint_interval", "checkpoint_cost", "detection_timeout",
                "repair_time", "seed")}
            data["options"]["policy"] = policy
            data["cluster_notes"], data["trace_notes"] = list(cluster.notes), list(trace.notes)
            data["trace_stats"] = dict(trace.stats)
            if past_end:
                data["notes"] = [*data.get("notes", []), past_end]
            out[policy] = data
            if not opts["compare"]:
                self.stdout.write(summary(data))
        if opts["compare"]:
            self.stdout.write(compare(out))
        if opts["json_path"]:
            body = out if opts["compare"] else out[policies[0]]
            try:
                Path(opts["json_path"]).write_text(json.dumps(body, indent=2, allow_nan=False, default=str))
            except OSError as exc:
                raise CommandError(f"--json {opts['json_path']}: cannot write it: {exc}") from exc
            self.stdout.write(f"report written to {opts['json_path']}")

    @staticmethod
    def _empty_window(name: str, start: float, whole, compress: float | None = None) -> str:
        """Why the replay has nothing to replay: the trace is empty, or --start is past its last arrival (new-user
        trial 10, F13: `--start 400` printed an empty report). `compress`: the --compress given with no --start, so
        the default start is past what the compression left (new-user trial 12, F13: `--compress 1e9` blamed a
        --start never given)."""
        if not whole.jobs:
            return f"the trace {name} has no jobs"
        first = min(j.submit for j in whole.jobs) / DAY
        last = max(j.submit for j in whole.jobs) / DAY
        if compress is not None:
            return (f"--compress {compress:g}: the trace {name}'s arrivals span days {first:.1f} to {last:.1f} once "
                    f"compressed, all before its default start (day {start:g}); give a smaller --compress or a "
                    f"--start of at most {math.floor(last * 10) / 10:g}")
        return (f"--start {start:g}: the trace {name} has no job arriving at or after day {start:g} (its arrivals "
                f"span days {first:.1f} to {last:.1f}); give a --start of at most {math.floor(last * 10) / 10:g}")

    @staticmethod
    def check_horizon(name: str, trace, compress: float | None) -> None:
        """CommandError when, with no --until, the replay would run past MAX_DAYS: the trace's last arrival (days
        from the start, after --compress) is later than that (new-user trial 14: `--compress 0.001` stretched
        Philly's arrivals over about 100,000 days and replayed them all)."""
        last = max(j.submit for j in trace.jobs) / DAY
        if last <= MAX_DAYS:
            return
        how = f" once stretched by --compress {compress:g}" if compress is not None else ""
        fix = " or a larger --compress" if compress is not None else ""
        raise CommandError(f"the trace {name}'s arrivals reach day {last:,.0f} from the start{how}, past the longest "
                           f"replay ({MAX_DAYS:,} days); give an --until of at most {MAX_DAYS:,} days{fix}")

    @staticmethod
    def _past_end(trace, until_days: float | None) -> str | None:
        """A note when --until reaches past the trace's last arrival (days from the start): no job arrives after it,
        so the replay only drains what is left (new-user trial 10, F13: it ran on silently)."""
        if until_days is None or not trace.jobs:
            return None
        last = max(j.submit for j in trace.jobs) / DAY
        if until_days <= last:
            return None
        return (f"--until {until_days:g} days is past the trace's last arrival (day {last:.2f} from the start): no job "
                f"arrives after that, so the rest of the span only drains the jobs left (and counts in the span's rates)")

    def _variants(self, path: str, cluster) -> dict:
        """{name: (ClusterSpec, CycleConfig)} from a what-if file (YAML or JSON); CommandError if unreadable."""
        import yaml

        from scheduler.forecast.variants import VariantError, apply_variant

        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"--what-if {path}: cannot read it: {exc}") from exc
        if not isinstance(data, dict) or len(data) < 2:
            raise CommandError(f"--what-if {path}: must map at least two variant names to their changes")
        try:
            return {str(name): apply_variant(cluster, v or {}, POLICIES, str(name)) for name, v in data.items()}
        except VariantError as exc:
            raise CommandError(f"--what-if {path}: {exc}") from exc

    def _progress(self, trace, until, policy):
        """A tqdm bar in simulated days, only when stdout is a terminal."""
        out = getattr(self.stdout, "_out", sys.stdout)
        if not (hasattr(out, "isatty") and out.isatty()) or not trace.jobs:
            return None, None
        from tqdm import tqdm

        first = 0.0  # the window's start: the replay's span begins there (replay(start=0.0))
        last = max(j.submit + j.duration for j in trace.jobs)
        total = ((until if until is not None else last) - first) / DAY
        bar = tqdm(total=round(total, 2), unit="day", file=out, dynamic_ncols=True, desc=policy,
                   bar_format="{l_bar}{bar}| day {n:.1f}/{total:.1f} [{elapsed}<{remaining}] {postfix}")

        def progress(p: Progress) -> None:
            day = round((p.now - first) / DAY, 2)
            if day - bar.n >= 0.01:
                bar.set_postfix_str(f"started {p.started:,} pending {p.pending:,}", refresh=False)
                bar.update(day - bar.n)

        return bar, progress


def _fmt_seconds(s) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, fmt=".3f") -> str:
    return "-" if x is None else format(x, fmt)


# a team's per-team figures when it never had demand (fairness.FairnessMeter.summary's shape): only rejections
NO_DEMAND = {"mean_usage_over_fair_share": None, "hours_with_demand": 0.0, "gpu_hours_used": 0.0,
             "fair_share_gpu_hours": 0.0}


def summary(d: dict) -> str:
    """A readable table of a report dict (ReplayReport.to_dict() plus policy/options)."""
    fair = d.get("fairness") or {}
    rows = [
        ("cluster / trace", f"{d['cluster']} ({d['cluster_gpus']:,} GPUs, {d['cluster_nodes']:,} nodes) / {d['trace']}"),
        ("policy", d.get("policy", "-")),
        ("simulated span", f"{d['span_days']:.2f} days ({d['span_seconds']:,.0f} s)"),
        ("jobs submitted", f"{d['jobs_submitted']:,} of {d['jobs_in_trace']:,} in the trace"),
        ("jobs started / finished", f"{d['jobs_started']:,} / {d['jobs_finished']:,}"),
        ("jobs rejected", f"{d['jobs_rejected']:,} {d['rejected_by_code'] or ''}"),
        ("pending / running at end", f"{d['jobs_pending_at_end']:,} / {d['jobs_running_at_end']:,}"),
        ("evictions / requeued", f"{d['evictions_by_rule'] or 0} / {d['jobs_requeued']:,}"),
        ("evictions per started job", _num(d.get("evictions_per_started_job"), ".4f")),
        ("restarts", f"{d['restarts']:,}"),
        ("mean allocation rate", _pct(d["mean_allocation_rate"])),
        ("mean fragmentation rate", _pct(d["mean_fragmentation_rate"])),
        ("Jain's index (all / contended)", f"{_num(fair.get('jain_mean'))} / {_num(fair.get('jain_contended_mean'))} "
                                           f"(contended {fair.get('hours_contended', 0):.0f} h)" if fair else "-"),
        ("goodput", f"{_pct(d.get('goodput'))} of {d.get('allocated_gpu_hours', 0):,.0f} allocated GPU-hours"),
        ("effective utilization", _ledger_text(d.get("gpu_hours") or {})),
        ("topology alignment", f"{_pct(d['topology_alignment'])} of {d['multi_node_jobs']:,} multi-node jobs"),
        ("cycles", f"{d['cycles']:,} (every >= {d['cycle_interval']:.0f}s simulated)"),
        ("engine ms / call", f"mean {d['engine_mean_ms']:.2f}, max {d['engine_max_ms']:.1f} "
                             f"(settled cycles call none)"),
        ("snapshot / apply ms", f"{d['snapshot_mean_ms']:.2f} / {d['apply_mean_ms']:.2f}"),
        ("wall time", f"{d['wall_seconds']:.1f}s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("")
    lines.append(f"{'queueing by size (GPUs)':<24}{'jobs':>8}{'p50':>9}{'p90':>9}{'p99':>9}")
    for label, q in [("all", d["queueing"]), *d["queueing_by_size"].items()]:
        lines.append(f"{label:<24}{q['count']:>8,}{_fmt_seconds(q['p50']):>9}{_fmt_seconds(q['p90']):>9}"
                     f"{_fmt_seconds(q['p99']):>9}")
    # per team: a team whose every job was rejected had no demand (its row: "-", zeros and its rejections; new-user
    # trial 13, F14b: it showed the fair share its rejected job's demand had for the time to the next cycle)
    rejected = d.get("rejected_by_team") or {}
    teams = sorted(set(fair.get("teams") or {}) | set(rejected)) if fair else []
    if teams:
        lines.append("")
        lines.append(f"{'team':<12}{'usage/fair':>11}{'h demand':>10}{'GPU-h used':>12}{'GPU-h fair':>12}"
                     f"{'rejected':>10}")
        for team in teams:
            t = fair["teams"].get(team) or NO_DEMAND
            lines.append(f"{team:<12}{_num(t['mean_usage_over_fair_share'], '.2f'):>11}{t['hours_with_demand']:>10.0f}"
                         f"{t['gpu_hours_used']:>12,.0f}{t['fair_share_gpu_hours']:>12,.0f}{rejected.get(team, 0):>10,}")
        lines.append("GPU-h fair: the team's water-filled fair share while it had demand (GPUs its running and pending "
                     "jobs use or ask for); a rejected job has no demand from its rejection on")
    f = d.get("failures") or {}
    if f:
        lines.append("")
        lines.append(f"failures: rate {f['rate']:g} per 1,000 GPU-days, detection {f['detection_timeout']:g}s, repair "
                     f"{f['repair_time']:g}s, seed {f['seed']}; checkpoint every "
                     f"{_fmt_seconds(d['checkpoint']['interval']) if d['checkpoint']['interval'] else 'never'}"
                     f" (cost {d['checkpoint']['cost']:g}s)")
        lines.append(f"node failures {f['node_failures']:,} ({f['node_failures_hitting_jobs']:,} hit jobs), job "
                     f"interruptions {f['job_interruptions']:,}, restarted {f['restarted']:,}")
        lines.append(f"{'per interruption':<24}{'count':>8}{'mean':>9}{'p50':>9}{'p90':>9}")
        for key in ("time_to_detect", "time_to_requeue", "time_to_restart"):
            q = f[key]
            lines.append(f"{key.replace('_', ' '):<24}{q['count']:>8,}{_fmt_seconds(q['mean']):>9}"
                         f"{_fmt_seconds(q['p50']):>9}{_fmt_seconds(q['p90']):>9}")
        w = d["waste_gpu_hours"]
        lines.append("GPU-hours not useful: " + ", ".join(f"{k} {v:,.1f}" for k, v in w.items()))
    if d["pending_by_code"]:
        lines.append(f"still pending, by reason: {d['pending_by_code']}")
    for note in d.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def compare(reports: dict) -> str:
    """Policies side by side (issue #3): queueing by size, evictions, fairness per team."""
    names = list(reports)
    w = 16
    lines = [f"{'':<30}" + "".join(f"{n:>{w}}" for n in names)]

    def row(label, values):
        lines.append(f"{label:<30}" + "".join(f"{v:>{w}}" for v in values))

    ds = [reports[n] for n in names]
    row("jobs started / finished", [f"{d['jobs_started']:,}/{d['jobs_finished']:,}" for d in ds])
    row("pending / running at end", [f"{d['jobs_pending_at_end']:,}/{d['jobs_running_at_end']:,}" for d in ds])
    row("mean allocation rate", [_pct(d["mean_allocation_rate"]) for d in ds])
    row("evictions", [f"{d['evictions']:,}" for d in ds])
    row("evictions per started job", [_num(d["evictions_per_started_job"], ".4f") for d in ds])
    row("restarts", [f"{d['restarts']:,}" for d in ds])
    row("Jain's index, all time", [_num((d.get("fairness") or {}).get("jain_mean")) for d in ds])
    row("Jain's index, contended", [_num((d.get("fairness") or {}).get("jain_contended_mean")) for d in ds])
    row("goodput", [_pct(d.get("goodput")) for d in ds])
    row("effective utilization", [_pct((d.get("gpu_hours") or {}).get("effective_utilization")) for d in ds])
    buckets = [label for label in ("all", *ds[0]["queueing_by_size"])]
    for label in buckets:
        for p in ("p50", "p99"):
            vals = []
            for d in ds:
                q = d["queueing"] if label == "all" else d["queueing_by_size"].get(label)
                vals.append(_fmt_seconds(q[p]) if q else "-")
            row(f"queueing {p}, {label} GPUs", vals)
    teams = sorted({t for d in ds for t in (d.get("fairness") or {}).get("teams", {})})
    for team in teams:
        vals = []
        for d in ds:
            t = (d.get("fairness") or {}).get("teams", {}).get(team)
            vals.append(_num(t["mean_usage_over_fair_share"], ".2f") if t else "-")
        row(f"usage/fair share, {team}", vals)
    row("wall time", [f"{d['wall_seconds']:.1f}s" for d in ds])
    return "\n".join(lines)


def _ledger_text(g: dict) -> str:
    """The GPU-hour ledger line: effective utilization and each bucket in GPU-hours (docs/telemetry.md)."""
    if not g:
        return "-"
    parts = ", ".join(f"{k.replace('_', ' ')} {g.get(k, 0):,.0f}" for k in (
        "useful", "lost_to_failure", "grace_and_startup", "held", "free_fragmented", "free", "down"))
    return (f"{_pct(g.get('effective_utilization'))} = useful / (capacity - down); GPU-hours: {parts} "
            f"(idle allocated: no telemetry in the replay)")
