"""New-user trial 3, item 3: a queue's used GPUs count a fractional share as GPU-equivalents (0.1 counts 0.1, not a
whole GPU) on every surface, as the scheduler charges it against the quota and as the jobs API's `gpus` says: the
cluster page's "Queue usage vs quota" table, the API's queue usage, the stored QueueSample (the queue charts and
their CSV) and Prometheus' gpuplatform_queue_allocated_gpus; and the number prints as 2.3, not 2.3000000000000003."""
from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone as tz

import pytest
from rest_framework.test import APIClient

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
SLEEP = ["sleep", "3600"]


@pytest.fixture
def shares_world(db, settings, django_user_model):
    """Queue q (team alpha) runs one job: a trainer of 2 whole GPUs and 3 serve tasks of 0.1 GPU on the shared
    GPU 0 (2.3 GPU-equivalents on 3 GPUs); then a pending job of 3 x 0.25 is submitted (0.75 of demand)."""
    from gpuplatform import services
    from gpuplatform.models import Job, Node, Queue
    from gpuplatform.scheduling import store

    settings.REDIS_URL = ""
    services.load_cluster_spec(ClusterSpec(name="one", nodes=(NodeSpec("n1", "H200", 8),),
                                           queues=(QueueSpec("q", team="alpha", quotas={"H200": (0, 8, 8)}),)))
    services.set_gpu_sharing(Node.objects.get(name="n1"), 0, "shared")
    queue = Queue.objects.get(name="q")
    job = services.submit_job(team=queue.team, queue=queue, name="mixed", command=SLEEP, submitted_at=CLOCK,
                              roles=[{"name": "trainer", "tasks": 1, "gpus_per_task": 2},
                                     {"name": "serve", "tasks": 3, "gpu_fraction": 0.1}])
    store.run_cycle_once(clock=CLOCK)
    assert Job.objects.get(pk=job.pk).state in Job.LIVE_STATES
    services.submit_job(team=queue.team, queue=queue, name="later", command=SLEEP,
                        submitted_at=CLOCK + timedelta(seconds=5),
                        roles=[{"name": "nb", "tasks": 3, "gpu_fraction": 0.25}])
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    return {"job": job, "user": user}


def test_queue_used_is_gpu_equivalents_everywhere(shares_world):
    from prometheus_client.parser import text_string_to_metric_families

    from gpuplatform import queries
    from gpuplatform.gpu_request import job_gpus
    from gpuplatform.models import Allocation, QueueSample

    live = Allocation.objects.filter(released_at__isnull=True)
    assert live.count() == 5 and sorted(live.values_list("gpu_milli", flat=True)) == [0, 0, 100, 100, 100]
    assert job_gpus(shares_world["job"]) == 2.3  # the jobs API's `gpus`: the number every surface must show

    usage = {u.queue: u for u in queries.queue_usage()}["q"]
    assert (usage.used, usage.pending_demand) == (2.3, 0.75)

    client = APIClient()
    client.force_login(shares_world["user"])
    jobs = client.get("/api/v1/jobs/?state=running&queue=q").json()["results"]
    assert sum(j["gpus"] for j in jobs) == pytest.approx(2.3)
    api = {q["queue"]: q for q in client.get("/api/v1/cluster-metrics/current/").json()["queues"]}["q"]
    assert (api["used"], api["pending_demand"]) == (2.3, 0.75)

    page = client.get("/cluster/")
    assert {u.queue: u.used for u in page.context["queue_usage"]}["q"] == 2.3
    assert '<td class="num">2.3</td>' in page.content.decode()

    sample = QueueSample.objects.filter(queue__name="q").order_by("-time").first()
    assert sample.used == pytest.approx(2.3) and sample.pending_demand == 0  # the cycle saw no pending job
    rows = list(csv.DictReader(io.StringIO(client.get("/queues/data.json?format=csv").content.decode())))
    assert [r["used"] for r in rows if r["queue"] == "q"] == ["2.3"]
    data = client.get("/queues/data.json").json()
    used_trace = next(t for t in data["figures"][f"q{sample.queue_id}"]["data"] if t["name"] == "used within quota")
    assert used_trace["y"] == [2.3]

    text = APIClient().get("/metrics").content.decode()
    used = {s.labels["queue"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "gpuplatform_queue_allocated_gpus" for s in f.samples}
    assert used["q"] == pytest.approx(2.3)
    assert 'gpuplatform_queue_allocated_gpus{queue="q",team="alpha"} 2.3\n' in text


def test_as_gpus_prints_whole_counts_as_integers_and_rounds_float_noise():
    from gpuplatform.borrowing import borrowed
    from gpuplatform.gpu_request import as_gpus, from_milli

    assert as_gpus(105.0) == 105 and isinstance(as_gpus(105.0), int)
    assert as_gpus(0.1 + 0.2) == 0.3 and str(as_gpus(103.49999999999)) == "103.5"
    assert from_milli(103_500) == 103.5 and from_milli(None) == 0 and as_gpus(None) is None
    assert str(borrowed(103.3, 100)) == "3.3" and borrowed(4, 8) == 0


def test_gpu_request_writes_a_run_of_equal_roles_once():
    """New-user report 3: a 64-role job's GPU string listed 64 terms. A run of three or more equal roles
    is written once with its count; shorter runs and different roles keep one term each."""
    from types import SimpleNamespace as R

    from gpuplatform.gpu_request import gpu_request

    whole = R(tasks=1, gpus_per_task=8, gpu_milli=0, gpu_memory_mib=0, mig_profile="")
    half = R(tasks=2, gpus_per_task=1, gpu_milli=500, gpu_memory_mib=0, mig_profile="")
    assert gpu_request([whole] * 64) == "64 roles of 8"
    assert gpu_request([whole, whole]) == "8+8"
    assert gpu_request([half] + [whole] * 3 + [half]) == "2x0.5+3 roles of 8+2x0.5"


def test_a_pending_gpu_memory_job_counts_its_share_of_the_largest_shared_gpu_everywhere(db, settings, django_user_model):
    """New-user trial 16, F12: a job asking 20000 MiB of GPU memory read `gpus: 0` while pending (API, gpuctl, the
    queueing page, the queues' demand) while its pending reason said it "needs 0.14 GPU-equivalents". While pending
    it now counts its share of the largest GPU that takes shares, rounded up as the engine rounds (the least the
    scheduler charges it), on every surface; once running, the share it got."""
    from gpuplatform import dashboard_queries, queries, services
    from gpuplatform.gpu_request import job_gpus
    from gpuplatform.models import Event, Gpu, Job, Node, Queue
    from gpuplatform.scheduling import store

    settings.REDIS_URL = ""
    services.load_cluster_spec(ClusterSpec(name="one", nodes=(NodeSpec("n1", "H200", 8),),
                                           queues=(QueueSpec("q", team="alpha", quotas={"H200": (0, 8, 8)}),)))
    Gpu.objects.update(memory_mib=143771)
    services.set_gpu_sharing(Node.objects.get(name="n1"), 0, "shared")
    queue = Queue.objects.get(name="q")
    job = services.submit_job(team=queue.team, queue=queue, name="mem", command=SLEEP, submitted_at=CLOCK,
                              roles=[{"name": "w", "tasks": 2, "gpu_memory_mib": 20000}])
    share = 2 * 0.14  # ceil(20000 x 1000 / 143771) = 140 thousandths per task
    assert job_gpus(job) == share
    assert "0.28 GPU-equivalents (2x20000MiB)" in Event.objects.get(kind="submitted", job=job).message
    assert {u.queue: u for u in queries.queue_usage()}["q"].pending_demand == share
    assert [r["gpus"] for r in dashboard_queries.pending_jobs()] == [share]
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True))
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["gpus"] == share
    store.run_cycle_once(clock=CLOCK)
    assert Job.objects.get(pk=job.pk).state in Job.LIVE_STATES
    assert job_gpus(Job.objects.get(pk=job.pk)) == share  # bound on a GPU of that size: the same share


def test_the_jobs_page_sorts_and_shows_memory_shares_as_the_jobs_api_counts_them(db, settings, django_user_model):
    """Trial 16's leftover: the jobs page sorted by GPUs with a memory share counted as 0 (queries.job_list's
    gpus_milli) while its column and the API counted it (job_gpus), and each pending memory job's row read the
    largest shared GPU again (one query per row). The page's column and sort are now queries.job_gpus_milli, the
    SQL twin of job_gpus (pending: the share of the largest shared GPU; running: its live allocations; finished:
    0), and the API list reads that GPU once per response."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gpuplatform import queries, services
    from gpuplatform.models import Gpu, Job, Node, Queue
    from gpuplatform.scheduling import store

    settings.REDIS_URL = ""
    services.load_cluster_spec(ClusterSpec(name="one", nodes=(NodeSpec("n1", "H200", 8),),
                                           queues=(QueueSpec("q", team="alpha", quotas={"H200": (0, 8, 8)}),)))
    Gpu.objects.update(memory_mib=143771)
    for index in range(4):
        services.set_gpu_sharing(Node.objects.get(name="n1"), index, "shared")
    queue = Queue.objects.get(name="q")

    def submit(name, at, **role):
        return services.submit_job(team=queue.team, queue=queue, name=name, command=SLEEP,
                                   submitted_at=CLOCK + timedelta(seconds=at), roles=[{"name": "w", **role}])

    running = submit("mem-run", 0, tasks=1, gpu_memory_mib=100000)  # 0.696 of a GPU, bound
    store.run_cycle_once(clock=CLOCK)
    assert Job.objects.get(pk=running.pk).state in Job.LIVE_STATES
    submit("whole", 1, tasks=1, gpus_per_task=4)  # submitted after the cycle: pending
    for i in range(3):
        submit(f"mem-{i}", 2 + i, tasks=3, gpu_memory_mib=60000)  # 3 x 0.418 = 1.254 each, pending
    submit("tenth", 9, tasks=1, gpu_fraction=0.1)
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_login(user)
    with CaptureQueriesContext(connection) as api_queries:
        api = {j["name"]: j["gpus"] for j in client.get("/api/v1/jobs/?limit=50").json()["results"]}
    assert api["mem-0"] == api["mem-1"] == 1.254 and api["tenth"] == 0.1 and api["whole"] == 4
    assert api["mem-run"] == 0.696
    shared_reads = [q for q in api_queries.captured_queries if 'MAX("gpuplatform_gpu"."memory_mib")' in q["sql"]]
    assert len(shared_reads) == 1  # once per response, not once per pending memory job
    sql = {j.name: j.gpus_milli for j in queries.job_list(user)}
    assert {name: milli / 1000 for name, milli in sql.items()} == api  # the SQL twin gives every job's `gpus`

    page = client.get("/jobs/?sort=-gpus").content.decode()
    order = [name for name in sorted(api, key=lambda n: (-api[n], n))]
    positions = {name: page.index(f">{name}<") for name in api}
    shown = sorted(api, key=positions.get)
    assert [api[n] for n in shown] == sorted(api.values(), reverse=True), shown  # descending by the API's gpus
    assert shown[0] == "whole" and shown[-1] == "tenth" and set(shown) == set(order)
    assert "1.254" in page and "0.696" in page  # the page shows the API's numbers
