"""GPU sharing on the dashboards (issue 14): the FGD measure per flavor, stored with each cycle's sample and drawn
on the fragmentation page, agrees wherever it is shown (chart, table, JSON, CSV, API, Prometheus); the topology
map zoomed to a node writes a shared GPU's used share on its cell and draws a MIG GPU's instances."""
from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone as tz

import pytest

from clusterspec.spec import ClusterSpec, QueueSpec
from frontend.dashboard_figures import FGD_EMPTY, fgd_by_flavor, fgd_figure
from frontend.topology import topology_payload

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
H200_MIB = 143_771
SLEEP = ["sleep", "3600"]


def build_mixed(services):
    """Node "mixed" (no domain): GPUs 0-1 shared, 2 = MIG 2 x 3g.71gb, 3 = MIG 7 x 1g.18gb, 4-7 exclusive, as
    its agent reports them; queue q of team alpha. Returns the node."""
    from gpuplatform.models import Node

    services.load_cluster_spec(ClusterSpec(name="s", nodes=(), queues=(
        QueueSpec("q", team="alpha", quotas={"H200": (0, 8, 8), "H200/mig-1g.18gb": (0, 7, 7)}),)))

    def mig(index, layout):
        return {"index": index, "uuid": f"GPU-{index}", "memory_mib": H200_MIB, "mig_mode": "enabled",
                "mig": [{"uuid": f"MIG-{index}-{k}", "profile": p, "memory_mib": m, "slices": s}
                        for k, (p, m, s) in enumerate(layout)]}
    gpus = [{"index": i, "uuid": f"GPU-{i}", "memory_mib": H200_MIB} for i in (0, 1, 4, 5, 6, 7)]
    gpus += [mig(2, [("3g.71gb", 71_424, 3)] * 2), mig(3, [("1g.18gb", 16_384, 1)] * 7)]
    node = services.register_node("mixed", flavor="H200", gpus=sorted(gpus, key=lambda g: g["index"]))
    Node.objects.filter(pk=node.pk).update(state="ready")
    for i in (0, 1):
        services.set_gpu_sharing(node, i, "shared")
    return node


def run_sharing_cycles(services, store, clock=CLOCK):
    """A 0.25-GPU job, a 0.5-GPU job and a job on two 1g.18gb instances, one cycle; then a 0.6-GPU job and two
    more cycles (three points; FGD packs the first two apart, so the measure is 0, and the 0.6 leaves 0.15 free
    on its GPU that 0.25 and 0.5 tasks cannot use and no GPU with 0.6 free: above 0). Returns each cycle's
    stored ClusterSample.sharing, in order."""
    from gpuplatform.models import Team

    team = Team.objects.get(name="alpha")
    seen = []
    for name, role in (("notebook", {"gpu_fraction": 0.25}), ("half", {"gpu_fraction": 0.5}),
                       ("inference", {"mig_profile": "1g.18gb", "mig_count": 2}), ("wide", {"gpu_fraction": 0.6})):
        if name == "wide":
            store.run_cycle_once(clock=clock)
            seen.append(store_metrics(clock))
        services.submit_job(command=SLEEP, team=team, queue="q", name=name, submitted_at=clock - timedelta(minutes=5),
                            roles=[{"name": "worker", "tasks": 1, **role}])
    for k in range(1, 3):
        store.run_cycle_once(clock=clock + timedelta(minutes=k))
        seen.append(store_metrics(clock + timedelta(minutes=k)))
    return seen


def store_metrics(at):
    from gpuplatform.models import ClusterSample

    return ClusterSample.objects.get(time=at).sharing


@pytest.fixture
def mixed(db, settings):
    from gpuplatform import services
    from gpuplatform.scheduling import store

    settings.REDIS_URL = ""
    node = build_mixed(services)
    samples = run_sharing_cycles(services, store)
    return {"node": node, "samples": samples}


# --- pure builders ------------------------------------------------------------------------------------

def test_fgd_figure_has_one_line_per_flavor_with_gaps_and_an_empty_state():
    t = [datetime(2024, 1, 1, 0, m, tzinfo=tz.utc) for m in range(3)]
    samples = [{"time": t[0], "sharing": {}},
               {"time": t[1], "sharing": {"fgd_fragmentation": {"H200": 0.123456, "A100": 1.0}}},
               {"time": t[2], "sharing": {"fgd_fragmentation": {"H200": 0.5}}}]
    fig = fgd_figure(samples)
    assert [tr["name"] for tr in fig["data"]] == ["A100", "H200"] and "empty" not in fig
    assert fig["data"][0]["y"] == [None, 1.0, None] and fig["data"][1]["y"] == [None, 0.12, 0.5]
    assert all(len(tr["x"]) == 3 for tr in fig["data"])
    assert fgd_by_flavor(samples[1]) == {"A100": 1.0, "H200": 0.12} and fgd_by_flavor(None) == {}
    assert fgd_figure(samples[:1])["empty"] == FGD_EMPTY and fgd_figure([])["data"] == []


def test_map_writes_the_used_share_on_a_shared_cell_and_draws_mig_instances():
    domains = [(1, "node:n0", 1, None)]
    gpus = [(i, i, "healthy", 1, "n0", "ready", "H200", 1) for i in range(4)]
    jobs = [{"id": 7, "name": "nb", "state": "running", "team_id": 1, "team_name": "red", "queue_id": 1,
             "queue_name": "red"},
            {"id": 8, "name": "inf", "state": "running", "team_id": 1, "team_name": "red", "queue_id": 1,
             "queue_name": "red"},
            {"id": 9, "name": "wide", "state": "running", "team_id": 2, "team_name": "blue", "queue_id": 2,
             "queue_name": "blue"}]
    shares = {0: {"text": "shared, 0.75 used", "used": 0.75, "instances": [], "jobs": [(7, 0.25), (9, 0.5)]},
              1: {"text": "shared, 0 used", "used": 0.0, "instances": [], "jobs": []},
              3: {"text": "MIG 1 of 3 instances used (1g.18gb x3)", "used": None,
                  "instances": [{"profile": "1g.18gb", "uuid": f"MIG-{k}", "job": 8 if k == 0 else None}
                                for k in range(3)]}}
    p = topology_payload(domains=domains, gpus=gpus, allocations={0: 9, 3: 8}, jobs=jobs, quotas={1: 8, 2: 8},
                         zoom="node:n0", shares=shares)
    assert p["level"] == "gpus"
    labels = {a["name"]: a for a in p["figure"]["layout"]["annotations"] if a.get("name", "").startswith("share:")}
    assert set(labels) == {"share:n0:0", "share:n0:1"}
    assert labels["share:n0:0"]["text"] == "75%" and labels["share:n0:1"]["text"] == "0%"
    run = next(t for t in p["figure"]["data"] if t["name"].startswith("running"))
    cell = run["x"].index(labels["share:n0:0"]["x"])
    assert run["y"][cell] == labels["share:n0:0"]["y"] and "shared, 0.75 used" in run["hovertext"][cell]
    # both jobs holding a fraction of GPU 0 are in its hover, and filtering on either keeps the cell lit
    assert "0.25 GPU: nb · team red" in run["hovertext"][cell] and "0.5 GPU: wide · team blue" in run["hovertext"][cell]
    for flt in ({"job": 7}, {"job": 9}, {"team": "red"}):
        lit = topology_payload(domains=domains, gpus=gpus, allocations={0: 9, 3: 8}, jobs=jobs, quotas={1: 8, 2: 8},
                               zoom="node:n0", shares=shares, **flt)
        cells = {(x, y): o for t in lit["figure"]["data"] if not t["name"].startswith("MIG")
                 for x, y, o in zip(t["x"], t["y"], t["marker"]["opacity"])}
        assert cells[(labels["share:n0:0"]["x"], labels["share:n0:0"]["y"])] == 1.0, flt
        dim = {a["name"]: a["opacity"] for a in lit["figure"]["layout"]["annotations"] if "opacity" in a}
        assert dim == {"share:n0:0": 1.0, "share:n0:1": 0.25}, flt  # GPU 1 holds no job: dimmed with its label
    used = next(t for t in p["figure"]["data"] if t["name"].startswith("MIG instance, used"))
    free = next(t for t in p["figure"]["data"] if t["name"].startswith("MIG instance, free"))
    assert len(used["x"]) == 1 and len(free["x"]) == 2 and "inf" in used["hovertext"][0]
    assert "MIG-0" in used["hovertext"][0] and used["customdata"][0][0] == 8
    # the dots sit inside GPU 3's cell (0.7 units wide: within 0.35 of its centre, dot included); one node's
    # row is drawn larger than the 17 px cells of a big zoom (the figure's minimum height gives it more room)
    gx, gy = run["x"][run["customdata"].index([8, "node:n0"])], run["y"][run["customdata"].index([8, "node:n0"])]
    px = run["marker"]["size"] / 0.7  # pixels per unit
    half = used["marker"]["size"] / 2 / px
    assert all(abs(x - gx) + half < 0.35 and abs(y - gy) + half < 0.35
               for t in (used, free) for x, y in zip(t["x"], t["y"]))
    assert run["marker"]["size"] > 17 and labels["share:n0:0"]["font"]["size"] > 8
    assert {r["gpu"]: r["share"] for r in p["rows"]}[3].startswith("MIG 1 of 3")
    # not zoomed: the domain level stays as it was (no labels, no instance dots)
    whole = topology_payload(domains=domains, gpus=gpus, allocations={0: 9, 3: 8}, jobs=jobs, quotas={1: 8, 2: 8},
                             shares=shares)
    assert whole["level"] == "domains" and not any(t["name"].startswith("MIG") for t in whole["figure"]["data"])


# --- through the database ------------------------------------------------------------------------------

def test_cycle_stores_the_engines_sharing_metrics(mixed):
    from gpuplatform.models import Allocation, ClusterSample

    first, second, third = mixed["samples"]
    assert first["allocated_gpu_equivalents"] == 0.75 and first["fgd_fragmentation"] == {"H200": 0.0}
    assert first["mig_used"] == 2 and first["mig_instances"] == 9 and first["shared_gpus"] == 2
    # 0.5 and 0.85 used; the mix {0.25, 0.5, 0.6} (a third each): 0.15 unusable by 0.25 and 0.5 tasks, all 0.65
    # free unusable by a 0.6 task (no GPU has 0.6 free): (0.15 + 0.15 + 0.65) / 3 GPUs
    assert third["allocated_gpu_equivalents"] == pytest.approx(1.35)
    assert third["fgd_fragmentation"]["H200"] == pytest.approx((0.15 + 0.15 + 0.65) / 3)
    assert ClusterSample.objects.order_by("-time").first().sharing == third == second
    assert Allocation.objects.filter(released_at__isnull=True, gpu_milli__gt=0).count() == 3


def test_fgd_number_agrees_on_chart_table_json_csv_api_and_prometheus(mixed, client, django_user_model):
    from gpuplatform.models import ClusterSample
    from gpuplatform.prometheus import PlatformCollector

    # a later sample with a non-round FGD value, so rounding would show if two places disagreed
    last = ClusterSample.objects.order_by("-time").first()
    ClusterSample.objects.filter(pk=last.pk).update(sharing={**last.sharing, "fgd_fragmentation": {"H200": 0.618034}})
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    page = client.get("/fragmentation/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-fgd="H200">0.62<' in html and 'id="fig-fgd"' in html
    chart = page.context["figures"]["fgd"]
    assert [t["name"] for t in chart["data"]] == ["H200"] and chart["data"][0]["y"][-1] == 0.62
    assert len([y for y in chart["data"][0]["y"] if y is not None]) == 3

    data = client.get("/fragmentation/data.json").json()
    assert data["figures"]["fgd"]["data"][0]["y"][-1] == 0.62
    assert data["latest"]["fgd_gpus_H200"] == 0.62 and data["sharing"]["fgd"] == [{"flavor": "H200", "gpus": 0.62}]
    assert 'data-fgd="H200">0.62<' in data["html"]["fragmentation-sharing"]
    rows = list(csv.DictReader(io.StringIO(client.get("/fragmentation/data.json?format=csv").content.decode())))
    assert rows[-1]["fgd_gpus_H200"] == "0.62" and len(rows) == 3

    api = client.get("/api/v1/cluster-metrics/current/").json()
    assert api["sample"]["sharing"]["fgd_fragmentation"] == {"H200": 0.618034}
    fams = {f.name: f for f in PlatformCollector().collect()}
    fgd = fams["gpuplatform_fgd_fragmentation_gpus"]
    assert [(s.labels, s.value) for s in fgd.samples] == [({"flavor": "H200"}, 0.618034)]


def test_map_zoomed_to_the_node_shows_the_share_and_the_instances(mixed, client, django_user_model):
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    p = client.get("/topology.json?zoom=node:mixed").json()
    assert p["level"] == "gpus"
    from django.db.models import Sum

    from gpuplatform.models import Allocation

    held = dict(Allocation.objects.filter(released_at__isnull=True, gpu_milli__gt=0).values_list("gpu__index")
                .annotate(s=Sum("gpu_milli")))
    labels = {a["name"]: a["text"] for a in p["figure"]["layout"]["annotations"] if a.get("name", "").startswith("share:")}
    assert labels == {f"share:mixed:{g}": f"{held.get(g, 0) // 10}%" for g in (0, 1)}
    assert sorted(held.values()) == [500, 850]
    share = {r["gpu"]: r["share"] for r in p["rows"]}
    assert share[3] == "MIG 2 of 7 instances used (1g.18gb x7)" and share[2].startswith("MIG 0 of 2")
    used = next(t for t in p["figure"]["data"] if t["name"].startswith("MIG instance, used"))
    free = next(t for t in p["figure"]["data"] if t["name"].startswith("MIG instance, free"))
    assert (len(used["x"]), len(free["x"])) == (2, 7) and all("inference" in h for h in used["hovertext"])
