"""Replay a real trace on a real cluster in simulated time, with the production engine.

    python manage.py replay --cluster philly --trace philly --until 7 --json /tmp/philly7.json

Loads both through the importer registry (gpuplatform.importers), runs scheduler.sim.replay and prints
a summary; --json writes the full report. Touches no database, so it works before `migrate`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduler.sim.replay import Progress, replay

DAY = 86400.0


class Command(BaseCommand):
    help = "Replay a workload trace on a cluster in simulated time and report allocation, queueing, topology."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="cluster name in the importer registry (philly, openb)")
        parser.add_argument("--trace", required=True, help="trace name in the importer registry (philly, openb)")
        parser.add_argument("--until", type=float, default=None, help="stop after this many days of trace time")
        parser.add_argument("--json", dest="json_path", default=None, help="write the full report to this file")
        parser.add_argument("--scale", type=float, default=None, help="cluster scale, passed to the cluster importer")
        parser.add_argument("--compress", type=float, default=None,
                            help="arrival-time compression, passed to the trace importer")
        parser.add_argument("--cycle-interval", type=float, default=60.0,
                            help="least simulated seconds between two scheduling cycles (default 60)")
        parser.add_argument("--grace-period", type=float, default=30.0,
                            help="seconds an evicted job keeps its GPUs before they are freed (default 30)")
        parser.add_argument("--time-limit-factor", type=float, default=None,
                            help="jobs declare this many times their duration as time limit (enables backfill "
                                 "reservations); default: no time limits")

    def handle(self, *args, **opts):
        from gpuplatform.importers import load_cluster, load_trace

        cluster_opts = {} if opts["scale"] is None else {"scale": opts["scale"]}
        trace_opts = {} if opts["compress"] is None else {"compress": opts["compress"]}
        try:
            cluster = load_cluster(opts["cluster"], **cluster_opts)
            trace = load_trace(opts["trace"], **trace_opts)
        except (KeyError, TypeError, ValueError) as exc:
            raise CommandError(f"cannot load cluster/trace: {exc}") from exc
        until = None if opts["until"] is None else opts["until"] * DAY
        self.stdout.write(f"cluster {cluster.name}: {len(cluster.nodes)} nodes, {cluster.gpus} GPUs; "
                          f"trace {trace.name}: {len(trace.jobs)} jobs")

        bar, progress = self._progress(trace, until)
        try:
            report = replay(cluster, trace, until=until, cycle_interval=opts["cycle_interval"],
                            grace_period=opts["grace_period"], time_limit_factor=opts["time_limit_factor"],
                            progress=progress)
        finally:
            if bar is not None:
                bar.close()

        data = report.to_dict()
        data["options"] = {k: opts[k] for k in ("cluster", "trace", "until", "scale", "compress", "cycle_interval",
                                                "grace_period", "time_limit_factor")}
        data["cluster_notes"], data["trace_notes"] = list(cluster.notes), list(trace.notes)
        data["trace_stats"] = dict(trace.stats)
        self.stdout.write(summary(data))
        if opts["json_path"]:
            Path(opts["json_path"]).write_text(json.dumps(data, indent=2, allow_nan=False, default=str))
            self.stdout.write(f"report written to {opts['json_path']}")

    def _progress(self, trace, until):
        """A tqdm bar in simulated days, only when stdout is a terminal."""
        out = getattr(self.stdout, "_out", sys.stdout)
        if not (hasattr(out, "isatty") and out.isatty()) or not trace.jobs:
            return None, None
        from tqdm import tqdm

        first = min(j.submit for j in trace.jobs)
        last = max(j.submit + j.duration for j in trace.jobs)
        total = ((until if until is not None else last) - first) / DAY
        bar = tqdm(total=round(total, 2), unit="day", file=out, dynamic_ncols=True,
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


def summary(d: dict) -> str:
    """A readable table of a report dict (ReplayReport.to_dict())."""
    rows = [
        ("cluster / trace", f"{d['cluster']} ({d['cluster_gpus']:,} GPUs, {d['cluster_nodes']:,} nodes) / {d['trace']}"),
        ("simulated span", f"{d['span_days']:.2f} days ({d['span_seconds']:,.0f} s)"),
        ("jobs submitted", f"{d['jobs_submitted']:,} of {d['jobs_in_trace']:,} in the trace"),
        ("jobs started / finished", f"{d['jobs_started']:,} / {d['jobs_finished']:,}"),
        ("jobs rejected", f"{d['jobs_rejected']:,} {d['rejected_by_code'] or ''}"),
        ("pending / running at end", f"{d['jobs_pending_at_end']:,} / {d['jobs_running_at_end']:,}"),
        ("evictions / requeued", f"{d['evictions_by_rule'] or 0} / {d['jobs_requeued']:,}"),
        ("mean allocation rate", _pct(d["mean_allocation_rate"])),
        ("mean fragmentation rate", _pct(d["mean_fragmentation_rate"])),
        ("topology alignment", f"{_pct(d['topology_alignment'])} of {d['multi_node_jobs']:,} multi-node jobs"),
        ("cycles", f"{d['cycles']:,} (every >= {d['cycle_interval']:.0f}s simulated)"),
        ("engine ms / cycle", f"mean {d['engine_mean_ms']:.2f}, max {d['engine_max_ms']:.1f}"),
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
    if d["pending_by_code"]:
        lines.append(f"still pending, by reason: {d['pending_by_code']}")
    for note in d.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
