"""Numbers people can trust (issue 13): one definition of "borrowed" shared by the queue tree, the queue charts
and the topology map (the two counts agree), warm-start jobs left out of wait figures (and the page says so),
durations in human units on pages with raw seconds in JSON/CSV, and the project's own docs linked from the
pages instead of a document users do not have."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from frontend.docs import slugify
from gpuplatform.models import Gpu, Job, QueueSample

from tests.frontend.conftest import T0

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_borrowed_counts_agree_between_queue_tree_and_map(client, world, make_job):
    """red's quota is 4 and it holds 4 GPUs; a second 3-GPU gang takes it to 7: 3 borrowed. The old map
    coloured whole gangs past the quota and the tree subtracted: now both count 3, and the definition is
    shown on both pages."""
    from gpuplatform.borrowing import BORROWED_DEFINITION

    node = world["node"]
    free = list(Gpu.objects.filter(node=node, index__in=[5, 6, 7]).order_by("index"))
    make_job(world["red"], world["jobs"]["red-running"].queue, "red-more", Job.State.RUNNING, tasks=1, gpus=3,
             node=node, gpus_on_node=free, at=T0 + timedelta(minutes=5))
    QueueSample.objects.create(time=T0 + timedelta(hours=1), queue=world["jobs"]["red-running"].queue, used=7,
                               guarantee=2, quota=4, limit=8, pending_demand=0)
    client.force_login(world["admin"])
    topo = client.get("/topology.json").json()
    assert topo["totals"]["borrowed"] == topo["borrowed_gpus"] == 3
    tree = client.get("/queues/data.json").json()["html"]["queue-tree"]
    red_row = next(r for r in re.findall(r"<tr.*?</tr>", tree, re.S) if ">red<" in r)
    assert re.search(r"</span>3</td>", red_row), red_row
    page = client.get("/queues/").content.decode()
    assert BORROWED_DEFINITION[:40] in page and "/docs/concepts/#borrowing" in page
    assert BORROWED_DEFINITION[:40] in client.get("/topology/").content.decode()


def test_topology_totals_follow_the_team_filter(client, world):
    client.force_login(world["admin"])
    everything = client.get("/topology.json").json()
    red = client.get("/topology.json?team=red").json()
    blue = client.get("/topology.json?team=blue").json()
    assert everything["shown_gpus"] == 8 and red["shown_gpus"] == 4 and blue["shown_gpus"] == 0
    assert red["totals"]["running"] + red["totals"]["borrowed"] == 4 and red["totals"]["free"] == 0


def test_warm_start_jobs_are_left_out_of_waits(client, world, make_job):
    """A warm-start job submitted 18 days before it started would make p99 18 days; it is not counted."""
    from gpuplatform import dashboard_queries as dq

    warm = make_job(world["blue"], world["jobs"]["blue-pending"].queue, "warm", Job.State.RUNNING,
                    at=T0 - timedelta(days=18))
    Job.objects.filter(pk=warm.pk).update(warm_start=True, started_at=T0)
    waits = dq.wait_times()
    assert waits and all(w["wait_seconds"] < 86400 for w in waits)
    client.force_login(world["admin"])
    page = client.get("/queueing/").content.decode()
    assert "warm-start jobs left out" in page
    rows = client.get("/queueing/data.json").json()
    assert all(r["wait_seconds"] < 86400 for r in rows.get("rows", waits))


def test_trace_feeder_marks_its_warm_start_jobs(db):
    """The replay's own warm start sets the flag (so the demo's figures leave those jobs out)."""
    from datetime import datetime, timezone

    from clusterspec.spec import ClusterSpec, NodeSpec, Trace, TraceJob
    from gpuplatform import services
    from gpuplatform.trace_feeder import TraceFeeder

    services.load_cluster_spec(ClusterSpec(name="w", nodes=(NodeSpec("n0", "H100", 8),)))
    team = services.create_team("t")
    services.create_queue("q", team=team, quotas={"H100": (0, 8, 8)})
    trace = Trace(name="tr", jobs=(TraceJob(id="a", submit=0.0, duration=1000.0, queue="q", tasks=1, gpus_per_task=1),
                                   TraceJob(id="b", submit=600.0, duration=10.0, queue="q", tasks=1, gpus_per_task=1),
                                   TraceJob(id="pod 7/é", submit=650.0, duration=10.0, queue="q", tasks=1,
                                            gpus_per_task=1)))
    feeder = TraceFeeder(trace, epoch=datetime(2026, 1, 1, tzinfo=timezone.utc), start_seconds=500.0,
                         warm_start=True)
    feeder.submit_due(feeder.at(700.0))
    assert dict(Job.objects.values_list("external_id", "warm_start")) == {"a": True, "b": False, "pod 7/é": False}
    # one's own trace ids need not follow the name rule: the name is made to, the id is kept in external_id
    assert Job.objects.get(external_id="pod 7/é").name == "tr-pod-7--"


def test_percentiles_in_human_units_with_raw_seconds_in_csv(client, world):
    client.force_login(world["admin"])
    html = client.get("/queueing/data.json").json()["html"]["pending-list"]
    assert re.search(r">\d+(s|m|h [0-9]+m)<|>1m<", html), html  # e.g. "1m", never "60 s"
    assert " s</td>" not in html
    csv = client.get("/queueing/data.json?format=csv").content.decode()
    assert "wait_seconds" in csv.splitlines()[0] and "60.0" in csv


def test_docs_pages_render_and_pages_cite_them_not_design():
    offenders = [p.name for p in TEMPLATES.rglob("*.html") if "DESIGN" in p.read_text()]
    assert offenders == []


@pytest.mark.parametrize("name,anchor", [("concepts", "borrowing"), ("concepts", "fragmentation"),
                                         ("operations", "backup"), ("api", "idempotency-key")])
def test_docs_pages(client, world, name, anchor):
    client.force_login(world["alice"])
    r = client.get(f"/docs/{name}/")
    assert r.status_code == 200 and f'id="{anchor}"' in r.content.decode()
    assert client.get("/docs/nope/").status_code == 404
    assert client.get("/docs/").status_code == 200


@pytest.mark.parametrize("url,param", [
    ("/queues/data.json?format=bogus", "format"),
    ("/fragmentation/data.json?format=csv&table=bogus", "table"),
    ("/queueing/data.json?format=csv&table=groups", "table"),  # fragmentation's table, not this endpoint's
    ("/queues/data.json?format=csv&table=pending", "table"),  # an endpoint with one table
    ("/cluster/metrics.json?table=x", "table"),  # new-user trial 12, F3: read, then ignored (200, the whole body)
    ("/cluster/metrics.json?table=pending", "table"),
])
def test_unknown_values_of_known_data_parameters_are_a_400_naming_them(client, world, url, param):
    client.force_login(world["alice"])
    r = client.get(url)
    assert r.status_code == 400 and list(r.json()) == [param], r.content[:300]


def test_the_tables_the_pages_link_are_served(client, world):
    client.force_login(world["alice"])
    groups = client.get("/fragmentation/data.json?format=csv&table=groups")
    series = client.get("/fragmentation/data.json?format=csv")
    assert groups.status_code == series.status_code == 200
    assert groups.content.splitlines()[0] != series.content.splitlines()[0]  # a different table
    pending = client.get("/queueing/data.json?format=csv&table=pending")
    assert pending.status_code == 200 and b"position" in pending.content.splitlines()[0]
    assert client.get("/queues/data.json?format=json").status_code == 200


DOC_FILES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "docs").glob("*.md"))


def test_every_docs_file_is_served_and_linked_from_the_index(client, world):
    """Every docs/*.md (read from the folder here, so a new file is covered) is a page, and the /docs/
    index links each one (the list is derived from the folder, not hard-coded)."""
    assert len(DOC_FILES) >= 12
    client.force_login(world["alice"])
    index = client.get("/docs/").content.decode()
    for name in DOC_FILES:
        r = client.get(f"/docs/{name}/")
        assert r.status_code == 200, name
        first_heading = next(line for line in (Path(__file__).resolve().parents[2] / "docs" / f"{name}.md")
                             .read_text().splitlines() if line.startswith("## "))
        assert f'id="{slugify(first_heading[3:])}"' in r.content.decode(), name
        if name != "concepts":  # the index IS the concepts page: its own entry is bold, not a link
            assert f'href="/docs/{name}/"' in index, name


@pytest.mark.parametrize("url", ["/cluster/metrics.json", "/queues/data.json", "/fragmentation/data.json",
                                 "/queueing/data.json", "/topology.json"])
def test_polled_json_answers_304_when_unchanged(client, world, url):
    """A poll that sends back the ETag gets 304 with no body; after a change the ETag differs."""
    client.force_login(world["admin"])
    first = client.get(url)
    tag = first["ETag"]
    assert first.status_code == 200 and tag.startswith('"')
    again = client.get(url, HTTP_IF_NONE_MATCH=tag)
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == tag
    QueueSample.objects.create(time=T0 + timedelta(hours=2), queue=world["jobs"]["red-running"].queue, used=1,
                               guarantee=2, quota=4, limit=8, pending_demand=0)
    Job.objects.filter(pk=world["jobs"]["blue-pending"].pk).update(state=Job.State.CANCELLED)
    Gpu.objects.filter(node=world["node"], index=7).update(health="unhealthy")
    changed = client.get(url, HTTP_IF_NONE_MATCH=tag)
    if url != "/fragmentation/data.json":  # its figures do not read queue samples or job states
        assert changed.status_code == 200 and changed["ETag"] != tag


def test_fragmentation_page_shows_each_flavor_and_machine_size(client, world):
    from gpuplatform.models import ClusterSample

    ClusterSample.objects.filter(cycle=3).update(by_group={
        "P100 x8": {"flavor": "P100", "node_gpus": 8, "nodes": 4, "free_nodes": 0, "schedulable_gpus": 32,
                    "free_gpus": 6, "largest_runnable": 3, "fragmentation_rate": 0.5},
        "P100 x2": {"flavor": "P100", "node_gpus": 2, "nodes": 10, "free_nodes": 9, "schedulable_gpus": 20,
                    "free_gpus": 18, "largest_runnable": 18, "fragmentation_rate": 0.0}})
    client.force_login(world["admin"])
    html = client.get("/fragmentation/").content.decode()
    rows = re.findall(r'<tr data-group="([^"]+)">(.*?)</tr>', html, re.S)
    assert [r[0] for r in rows] == ["P100 x8", "P100 x2"] and ">50%<" in rows[0][1]
    data = client.get("/fragmentation/data.json").json()
    assert [g["group"] for g in data["groups"]] == ["P100 x8", "P100 x2"]
    csv = client.get("/fragmentation/data.json?format=csv&table=groups").content.decode()
    assert csv.splitlines()[0].startswith("group,") and "P100 x2" in csv
