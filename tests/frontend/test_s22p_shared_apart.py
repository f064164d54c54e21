"""The cluster page's allocation card says what its rate leaves out (new-user trial 22, G9): GPUs in mode shared or
MIG are neither schedulable nor free (docs/concepts.md, Metrics), while the queue table's `used` counts the
GPU-equivalents jobs hold on them; the card read "100.0 % 1 of 1 GPUs" beside queue demo "used 2"."""
from __future__ import annotations

import html as htmllib
import re

import pytest

from gpuplatform.models import Allocation, Gpu, Job, Node

pytestmark = pytest.mark.django_db


def _share(world, make_job, *, sharing=Gpu.Sharing.SHARED, jobs=2, milli=500):
    """A node whose one GPU is in mode `sharing`, and `jobs` red jobs holding `milli` of it each."""
    node = Node.objects.create(name="node-s", flavor="P100", gpu_count=1, domain=world["node"].domain)
    gpu = Gpu.objects.create(node=node, index=0, sharing=sharing)
    for i in range(jobs):
        job = make_job(world["red"], world["queues"]["red"], f"red-share-{i}", Job.State.RUNNING, node=node)
        task = job.tasks.get()
        Allocation.objects.create(task=task, gpu=gpu, job=job, created_at=job.started_at, gpu_milli=milli)
    return gpu


def _card(html: str) -> str:
    start = html.index('<span class="label">allocation rate</span>')
    return htmllib.unescape(re.sub(r"<[^>]+>", "", html[start:html.index("</div>", start)]))


def _red_used(html: str) -> str:
    row = re.search(r'\?queue=red">red</a></th>.*?<td class="num">([^<]*)</td>', html, re.S)
    return row.group(1)


def test_card_says_the_shared_gpus_counted_apart_beside_the_queue_tables_used(client, world, make_job):
    _share(world, make_job)
    client.force_login(world["alice"])
    html = client.get("/cluster/").content.decode()
    card = " ".join(_card(html).split())
    assert "50.0% 4 of 8 GPUs" in card  # the sample's rate, unchanged
    assert ("+ 1 GPU shared by 2 jobs now (1 GPU-equivalent), counted apart: GPUs in mode shared or MIG are not in "
            "the rate; the queue table's used counts them") in card
    assert _red_used(html) == "5"  # 4 whole GPUs + 2 x 0.5 on the shared GPU: the card now accounts for the 1
    numbers = client.get("/cluster/metrics.json").json()["numbers"]  # the poll keeps the line up to date
    assert numbers["shared_apart"].startswith("+ 1 GPU shared by 2 jobs now (1 GPU-equivalent), counted apart")


def test_no_line_without_shared_gpus_held_and_auto_gpus_are_in_the_rate(client, world, make_job):
    client.force_login(world["alice"])
    assert client.get("/cluster/metrics.json").json()["numbers"]["shared_apart"] == ""
    assert "counted apart" not in _card(client.get("/cluster/").content.decode())
    # an auto GPU holding a fraction counts as allocated in the rate (docs/concepts.md): nothing apart to say
    _share(world, make_job, sharing=Gpu.Sharing.AUTO, jobs=1)
    assert client.get("/cluster/metrics.json").json()["numbers"]["shared_apart"] == ""


def test_three_shares_on_two_shared_gpus(client, world, make_job):
    gpu = _share(world, make_job, jobs=2, milli=250)
    other = Gpu.objects.create(node=gpu.node, index=1, sharing=Gpu.Sharing.SHARED)
    job = make_job(world["red"], world["queues"]["red"], "red-share-x", Job.State.RUNNING, node=gpu.node)
    Allocation.objects.create(task=job.tasks.get(), gpu=other, job=job, created_at=job.started_at, gpu_milli=500)
    client.force_login(world["admin"])
    line = client.get("/cluster/metrics.json").json()["numbers"]["shared_apart"]
    assert line.startswith("+ 2 GPUs shared by 3 jobs now (1 GPU-equivalent)")
