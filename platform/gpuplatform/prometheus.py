"""Prometheus exposition at /metrics: a custom collector that reads the database at scrape time.

Nothing is kept in process memory, so every web replica answers the same numbers and a restart loses
nothing: gauges come from the latest ClusterSample / QueueSample / SchedulerCycle the scheduling cycle
wrote (gpuplatform/scheduling/samples.py), counters and histograms are aggregates over Job, Event and SchedulerCycle
rows (monotonic as long as rows are not pruned). A scrape costs a fixed number of queries (about 8),
whatever the cluster size. Units: GPUs, seconds; rates are 0..1.

Metric names, and what an operator of Kueue or Volcano knows them as:

| gpuplatform_...                            | labels        | Kueue / Volcano counterpart                                        |
| ------------------------------------------ | ------------- | ------------------------------------------------------------------ |
| queue_allocated_gpus                       | queue, team   | kueue_cluster_queue_resource_usage; volcano_queue_allocated_milli_cpu / _memory_bytes (GPU here) |
| queue_quota_gpus                           | queue, team   | kueue_cluster_queue_nominal_quota; volcano_queue_deserved_*        |
| queue_guarantee_gpus                       | queue, team   | volcano_queue_* guarantee (Volcano Queue spec.guarantee)           |
| queue_limit_gpus (absent = no cap)         | queue, team   | kueue_cluster_queue_borrowing_limit (+nominal); volcano_queue_capability_* |
| queue_fair_share_gpus                      | queue, team   | kueue_cluster_queue_weighted_share (as GPUs); volcano_queue_share / deserved |
| queue_pending_gpus                         | queue, team   | volcano_queue_request_* minus allocated                            |
| pending_jobs                               | queue, team   | kueue_pending_workloads; volcano_queue_pod_group_pending_count     |
| running_jobs                               | queue, team   | kueue_admitted_active_workloads; volcano_queue_pod_group_running_count |
| admission_wait_seconds (histogram)         | queue         | kueue_admission_wait_time_seconds; volcano e2e job scheduling latency |
| preemptions_total (counter)                | rule          | kueue_preempted_workloads_total{reason}; volcano_preemption_victims / _attempts |
| cycle_duration_seconds (gauge, last cycle) | action        | volcano_action_scheduling_latency_microseconds{action}; kueue admission_attempt_duration |
| e2e_cycle_duration_seconds (histogram)     |               | volcano_e2e_scheduling_latency_milliseconds                        |
| cycles_total, cycle_errors_total           |               | kueue_admission_attempts_total{result}; volcano schedule attempts  |
| last_cycle_timestamp_seconds               |               | (ours) wall time the latest cycle started: alert on time() - it     |
| allocation_rate                            |               | (ours, DESIGN section 6) allocated / schedulable GPUs              |
| fragmentation_rate                         |               | (ours) 1 - largest runnable job / free GPUs                        |
| largest_runnable_job_gpus                  | tier          | (ours) most GPUs one job could get in one domain of tier <= t      |
| domain_completeness                        |               | (ours) share of tier-1 domains all free or all used                |
| cluster_gpus                               | state         | kube's allocatable / requested GPUs (schedulable, allocated, free) |
| fgd_fragmentation_gpus                     | flavor        | (ours, issue 14) GPUs of free share the request mix cannot use (FGD) |

GPU telemetry (DCGM_FI_DEV_* under dcgm-exporter's names and labels, gpuplatform_idle_allocated_gpus):
gpuplatform/telemetry/exporter.py.

The queue gauges of an inner queue (a department, `root`) are its subtree's: its allocated and pending GPUs and
its pending and running jobs count every job of every queue below it, as the queues page shows them; summing a
gauge over all queues counts a job once per level, so sum over the leaf queues (or take the root's).

`queue_fair_share_gpus` is exported only when the samples carry it (QueueSample.fair_share, if the
schema has it); the other queue gauges come from the latest sample of each queue.
"""
from __future__ import annotations

import hmac
import os
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .models import ClusterSample, Event, Job, Queue, QueueSample, SchedulerCycle
from .queries import queue_job_counts

PREFIX = "gpuplatform"
# admission wait buckets (seconds): 1 s .. 1 week, like Kueue's exponential buckets but wider (batch GPU jobs)
WAIT_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PREEMPTION_KINDS = {"preempted": "preempt", "reclaimed": "reclaim", "evicted": "evict", "moved": "reschedule",
                    "stopped_for_spare": "spare"}


def _name(metric: str) -> str:
    return f"{PREFIX}_{metric}"


class PlatformCollector:
    """Builds every metric family from the database on each `collect()` (one scrape)."""

    def collect(self):
        yield from self._cluster()
        yield from self._queues()
        yield from self._admission_wait()
        yield from self._preemptions()
        yield from self._cycles()

    # -- cluster ---------------------------------------------------------------------------------------
    def _cluster(self):
        sample = ClusterSample.objects.order_by("-time", "-id").first()
        alloc = GaugeMetricFamily(_name("allocation_rate"), "Allocated GPUs / schedulable GPUs (latest cycle).")
        frag = GaugeMetricFamily(_name("fragmentation_rate"),
                                 "1 - largest runnable job / free GPUs (0 when nothing is free; latest cycle).")
        complete = GaugeMetricFamily(_name("domain_completeness"),
                                     "Share of tier-1 domains whose GPUs are all free or all used.")
        largest = GaugeMetricFamily(_name("largest_runnable_job_gpus"),
                                    "Most GPUs one job could get now inside one domain of tier <= tier.", labels=["tier"])
        gpus = GaugeMetricFamily(_name("cluster_gpus"), "Cluster GPUs by state (latest cycle): schedulable = allocated "
                                 "+ held (for jobs not started: reservations, eviction beneficiaries) + free.",
                                 labels=["state"])
        fgd = GaugeMetricFamily(_name("fgd_fragmentation_gpus"), "FGD fragmentation (Weng et al., ATC '23): GPUs' "
                                "worth of free share on shared and auto GPUs the request mix cannot use (latest cycle; "
                                "absent without GPU sharing).", labels=["flavor"])
        if sample is not None:
            for flavor, value in sorted(((sample.sharing or {}).get("fgd_fragmentation") or {}).items()):
                fgd.add_metric([str(flavor)], float(value))
            alloc.add_metric([], sample.allocation_rate)
            frag.add_metric([], sample.fragmentation_rate)
            complete.add_metric([], sample.domain_completeness)
            for tier, value in sorted((sample.largest_runnable or {}).items(), key=lambda kv: str(kv[0])):
                largest.add_metric([str(tier)], float(value or 0))
            for state, value in (("schedulable", sample.schedulable_gpus), ("allocated", sample.allocated_gpus),
                                 ("held", sample.held_gpus), ("free", sample.free_gpus)):
                gpus.add_metric([state], value)
        yield from (alloc, frag, complete, largest, gpus, fgd)

    # -- queues ----------------------------------------------------------------------------------------
    def _queues(self):
        labels = ["queue", "team"]
        fams = {key: GaugeMetricFamily(_name(name), doc, labels=labels) for key, name, doc in (
            ("used", "queue_allocated_gpus", "GPUs allocated to the queue's jobs (subtree), latest cycle."),
            ("quota", "queue_quota_gpus", "The queue's deserved (nominal) quota in GPUs, summed over flavors."),
            ("guarantee", "queue_guarantee_gpus", "GPUs never reclaimed below, summed over flavors."),
            ("limit", "queue_limit_gpus", "Hard cap in GPUs including borrowing (absent: no cap of its own)."),
            ("fair_share", "queue_fair_share_gpus", "The queue's water-filled fair share in GPUs, latest cycle."),
            ("pending_demand", "queue_pending_gpus", "GPUs requested by the queue's pending jobs (subtree)."),
            ("pending", "pending_jobs", "Pending jobs in the queue's subtree (its own and every queue's below it, "
                                        "as queue_allocated_gpus and the queues page): sum over leaf queues only."),
            ("running", "running_jobs", "Admitted / running / preempting jobs in the queue's subtree (its own and "
                                        "every queue's below it, as the queues page): sum over leaf queues only."),
        )}
        queues = {qid: (name, team or "") for qid, name, team in Queue.objects.values_list("id", "name", "team__slug")}
        latest = QueueSample.objects.order_by("-time").values_list("time", flat=True).first()
        has_fair = any(f.name == "fair_share" for f in QueueSample._meta.get_fields())
        if latest is not None:
            cols = ["queue_id", "used", "quota", "guarantee", "limit", "pending_demand"] + (["fair_share"] if has_fair else [])
            for row in QueueSample.objects.filter(time=latest).values(*cols):
                if row["queue_id"] not in queues:
                    continue
                lv = list(queues[row["queue_id"]])
                for key in ("used", "quota", "guarantee", "pending_demand"):
                    fams[key].add_metric(lv, row[key] or 0)
                if row["limit"] is not None:
                    fams["limit"].add_metric(lv, row["limit"])
                if has_fair and row.get("fair_share") is not None:
                    fams["fair_share"].add_metric(lv, row["fair_share"])
        counts = queue_job_counts(subtree=True)  # the queues page's numbers (queries.queue_usage)
        for qid, lv in queues.items():
            pending, running = counts.get(qid, (0, 0))
            fams["pending"].add_metric(list(lv), pending)
            fams["running"].add_metric(list(lv), running)
        yield from fams.values()

    # -- histograms and counters -----------------------------------------------------------------------
    def _admission_wait(self):
        wait = ExpressionWrapper(F("started_at") - F("submitted_at"), output_field=DurationField())
        aggregates = {f"le{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=b))) for i, b in enumerate(WAIT_BUCKETS)}
        rows = (Job.objects.filter(started_at__isnull=False).annotate(wait=wait).values("queue__name")
                .annotate(n=Count("id"), total=Sum("wait"), **aggregates).order_by("queue__name"))
        hist = HistogramMetricFamily(_name("admission_wait_seconds"),
                                     "Time from submission to first admission of started jobs.", labels=["queue"])
        for row in rows:
            buckets = [(_le(b), row[f"le{i}"]) for i, b in enumerate(WAIT_BUCKETS)] + [("+Inf", row["n"])]
            total = row["total"]
            hist.add_metric([row["queue__name"]], buckets, sum_value=max(0.0, _seconds(total)))
        yield hist

    def _preemptions(self):
        counter = CounterMetricFamily(_name("preemptions"), "Gangs evicted, by rule (preempt inside a queue, "
                                      "reclaim across queues).", labels=["rule"])
        found = dict(Event.objects.filter(kind__in=PREEMPTION_KINDS).values("kind").annotate(n=Count("id"))
                     .order_by().values_list("kind", "n"))
        for kind, rule in PREEMPTION_KINDS.items():
            counter.add_metric([rule], found.get(kind, 0))
        yield counter

    def _cycles(self):
        last = SchedulerCycle.objects.order_by("-number").first()
        phase = GaugeMetricFamily(_name("cycle_duration_seconds"),
                                  "Duration of each phase (action) of the latest scheduling cycle.", labels=["action"])
        if last is not None:
            for action, value in sorted((last.timings or {}).items()):
                if not isinstance(value, (int, float)):
                    continue
                if action.endswith("_ms"):
                    action, value = action[:-3], value / 1000.0
                phase.add_metric([action], float(value))
            phase.add_metric(["e2e"], last.duration_ms / 1000.0)
        yield phase
        # When the newest cycle started (wall clock, Unix seconds): alert on time() - this (new-user trial 14, F10)
        started = GaugeMetricFamily(_name("last_cycle_timestamp_seconds"),
                                    "Wall time the latest scheduling cycle started (Unix seconds); absent before the first.")
        if last is not None:
            started.add_metric([], last.started_at.timestamp())
        yield started
        aggregates = {f"le{i}": Count("id", filter=Q(duration_ms__lte=b * 1000)) for i, b in enumerate(CYCLE_BUCKETS)}
        agg = SchedulerCycle.objects.aggregate(n=Count("id"), total=Sum("duration_ms"),
                                               errors=Count("id", filter=~Q(error="")), binds=Sum("binds"), **aggregates)
        hist = HistogramMetricFamily(_name("e2e_cycle_duration_seconds"), "Wall time of whole scheduling cycles.")
        hist.add_metric([], [(_le(b), agg[f"le{i}"]) for i, b in enumerate(CYCLE_BUCKETS)] + [("+Inf", agg["n"])],
                        sum_value=(agg["total"] or 0.0) / 1000.0)
        yield hist
        cycles = CounterMetricFamily(_name("cycles"), "Scheduling cycles run.")
        cycles.add_metric([], agg["n"])
        errors = CounterMetricFamily(_name("cycle_errors"), "Scheduling cycles that raised.")
        errors.add_metric([], agg["errors"])
        binds = CounterMetricFamily(_name("binds"), "Jobs started by scheduling cycles.")
        binds.add_metric([], agg["binds"] or 0)
        yield from (cycles, errors, binds)


def _le(bound: float) -> str:
    return repr(float(bound))


def _seconds(value) -> float:
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value) / 1e6  # backends returning microseconds


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(PlatformCollector())


@csrf_exempt  # takes no unsafe method: a POST is the 405 of require_safe, not Django's HTML CSRF page
@require_safe  # GET / HEAD; another method is a 405 with Allow (new-user trial 11, F15: POST answered 200)
def metrics_view(request):
    """GET /metrics. Closed (403) with DJANGO_PRODUCTION=1 and no METRICS_TOKEN. Open on a laptop unless
    METRICS_TOKEN is set (settings or environment); then it needs
    `Authorization: Bearer <METRICS_TOKEN>` (Prometheus' `authorization` / `bearer_token` scrape option)."""
    token = getattr(settings, "METRICS_TOKEN", None) or os.environ.get("METRICS_TOKEN", "")
    if not token and getattr(settings, "PRODUCTION", False):
        return HttpResponse("metrics are closed: set METRICS_TOKEN (DJANGO_PRODUCTION=1 never serves them open)\n",
                            status=403, content_type="text/plain")
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return HttpResponse("metrics need a bearer token\n", status=401, content_type="text/plain",
                                headers={"WWW-Authenticate": "Bearer"})
    from .telemetry.exporter import exposition  # GPU telemetry under dcgm-exporter's names

    return HttpResponse(generate_latest(REGISTRY) + exposition().encode(), content_type=CONTENT_TYPE_LATEST)
