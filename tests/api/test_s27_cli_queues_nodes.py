"""`gpuctl queues` and `gpuctl nodes` (session 27): a Slurm / Kueue user could not see the cluster or the quotas
from gpuctl (no `sinfo`, no `sacctmgr show assoc` / `kubectl get clusterqueue`). Both print what the API gives,
against a live server: the small cluster (4 x 8 H100; root > alpha, beta with quotas) with a running job, a cordoned
node and an unhealthy GPU; --json; the empty case; no token; bad usage."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv("GPUCTL_API", raising=False)
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)


@pytest.fixture
def gpuctl(live_server, capsys):
    from gpuplatform.cli import main
    from gpuplatform.services import issue_api_token

    def run(user, *argv):
        token = ["--token", issue_api_token(user)[0]] if user is not None else []
        code = main(["--api", live_server.url, *token, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def busy(users, client_for):
    """A 2 x 2-GPU job of alpha running, an 8-GPU job of beta pending, n1 cordoned with a reason, GPU 5 of n3
    unhealthy; the API's answers."""
    from gpuplatform import services
    from gpuplatform.models import Gpu, Node, Queue
    from gpuplatform.scheduling import store

    services.submit_job(command=["sleep", "3600"], team=Queue.objects.get(name="alpha").team, queue="alpha",
                        name="train", roles=[{"tasks": 2, "gpus_per_task": 2}], submitter=users["member"])
    services.cordon_node(Node.objects.get(name="n1"), reason="fan swap")
    store.run_cycle_once()
    services.submit_job(command=["sleep", "3600"], team=Queue.objects.get(name="beta").team, queue="beta",
                        name="waits", roles=[{"tasks": 1, "gpus_per_task": 8}], submitter=users["other"])  # no cycle yet
    Gpu.objects.filter(node__name="n3", index=5).update(health=Gpu.Health.UNHEALTHY, health_reason="xid 79")
    admin = client_for("staff")
    return {"nodes": admin.get("/api/v1/nodes/").json()["results"],
            "usage": {u["queue"]: u for u in admin.get("/api/v1/cluster-metrics/current/").json()["queues"]}}


def rows(out: str) -> list[list[str]]:
    return [line.split(None, 7) for line in out.splitlines()]


def test_nodes_prints_the_apis_figures(gpuctl, users, busy):
    code, out, err = gpuctl(users["member"], "nodes")
    assert (code, err) == (0, "")
    table = rows(out)
    assert table[0] == ["NAME", "FLAVOR", "STATE", "GPUS", "USED", "UNHEALTHY", "DOMAIN", "REASON"]
    by_name = {r[0]: r for r in table[1:]}
    assert list(by_name) == ["n0", "n1", "n2", "n3"]
    api = {n["name"]: n for n in busy["nodes"]}
    for name, row in by_name.items():  # every figure is the API's own
        assert row[1:5] == ["H100", api[name]["state"], "8", str(api[name]["allocated_gpus"])]
        assert row[6] == api[name]["domain"]
    assert by_name["n1"][2] == "cordoned" and by_name["n1"][7] == "fan swap"
    assert sorted(r[4] for r in by_name.values()) == ["0", "0", "0", "4"]  # the job's 2 x 2 GPUs on one node
    assert [r[5] for r in table[1:]] == ["-", "-", "-", "gpu5"]
    assert [len(r) for r in table[1:]] == [7, 8, 7, 7]  # no reason: the line ends at DOMAIN (rstrip)
    # the columns line up as the job table's do: each cell starts where its header does
    lines = out.splitlines()
    start = lines[0].index("DOMAIN")
    assert all(line[start:].startswith(("nvl-a1", "nvl-a2")) for line in lines[1:])

    code, out, err = gpuctl(users["member"], "nodes", "--state", "cordoned")
    assert (code, err) == (0, "") and [r[0] for r in rows(out)[1:]] == ["n1"]
    code, out, err = gpuctl(users["member"], "nodes", "--flavor", "H100", "--state", "ready")
    assert (code, err) == (0, "") and [r[0] for r in rows(out)[1:]] == ["n0", "n2", "n3"]


def test_queues_prints_the_apis_figures(gpuctl, users, busy):
    code, out, err = gpuctl(users["staff"], "queues")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "PARENT", "TEAM", "WEIGHT", "STATE", "USED", "RUNNING", "PENDING",
                                "PENDING-GPUS", "QUOTAS", "(FLAVOR", "GUARANTEE/QUOTA/LIMIT)"]
    table = {line.split()[0]: line.split(None, 9) for line in lines[1:]}
    usage = busy["usage"]
    assert usage["alpha"]["used"] == 4 and usage["beta"]["pending_jobs"] == 1  # the world as meant
    for name, parent, team, weight, quota in (("alpha", "root", "alpha", "1.0", "H100 4/16/32"),
                                              ("beta", "root", "beta", "2.0", "H100 0/16/none"),
                                              ("root", "-", "-", "1.0", "H100 0/32/32")):
        u = usage[name]
        assert table[name] == [name, parent, team, weight, "open", str(u["used"]), str(u["running_jobs"]),
                               str(u["pending_jobs"]), str(u["pending_demand"]), quota]
    assert table["alpha"][5:9] == ["4", "1", "0", "0"] and table["beta"][5:9] == ["0", "0", "1", "8"]
    assert table["root"][5:9] == ["4", "1", "1", "8"]  # an inner queue's figures are its subtree's (the API's)

    # a team member: the inner queue is listed (the queues API shows it) but the usage API gives no row for it
    code, out, err = gpuctl(users["member"], "queues")
    assert (code, err) == (0, "")
    table = {line.split()[0]: line.split(None, 9) for line in out.splitlines()[1:]}
    assert list(table) == ["alpha", "root"]
    assert table["root"][5:9] == ["-", "-", "-", "-"] and table["alpha"][5:9] == ["4", "1", "0", "0"]


def test_json_prints_the_apis_answers(gpuctl, users, busy, client_for):
    code, out, err = gpuctl(users["staff"], "nodes", "--json")
    assert (code, err) == (0, "")
    got = json.loads(out)
    assert got["count"] == 4 and [n["name"] for n in got["results"]] == ["n0", "n1", "n2", "n3"]
    assert got["results"] == client_for("staff").get("/api/v1/nodes/").json()["results"]

    code, out, err = gpuctl(users["staff"], "queues", "-o", "json")
    assert (code, err) == (0, "")
    got = json.loads(out)
    assert got["results"] == client_for("staff").get("/api/v1/queues/").json()["results"]
    assert {u["queue"]: u for u in got["usage"]} == busy["usage"] and got["usage_time"]


def test_every_page_is_followed(gpuctl, users, cluster, monkeypatch):
    from gpuplatform import cli

    monkeypatch.setattr(cli, "PAGE_MAX", 3)  # 4 nodes, 3 queues: two pages of nodes, one of queues
    code, out, err = gpuctl(users["staff"], "nodes")
    assert (code, err) == (0, "") and [r[0] for r in rows(out)[1:]] == ["n0", "n1", "n2", "n3"]
    code, out, _ = gpuctl(users["staff"], "nodes", "--json")
    assert json.loads(out)["count"] == 4 and len(json.loads(out)["results"]) == 4


def test_none_to_show_is_said_and_exits_0(gpuctl, django_user_model):
    user = django_user_model.objects.create_user("lonely", password="pw", is_staff=True)  # no cluster loaded
    assert gpuctl(user, "queues") == (0, "", "gpuctl queues: no queues you may see\n")
    assert gpuctl(user, "nodes") == (0, "", "gpuctl nodes: no nodes\n")
    code, out, err = gpuctl(user, "nodes", "--json")
    assert (code, err) == (0, "") and json.loads(out)["results"] == []


def test_no_node_in_that_state_is_said_and_exits_0(gpuctl, users):
    assert gpuctl(users["member"], "nodes", "--state", "in_repair") == (
        0, "", "gpuctl nodes: no nodes with state in_repair\n")
    assert gpuctl(users["member"], "nodes", "--flavor", "H100", "--state", "draining") == (
        0, "", "gpuctl nodes: no nodes with flavor H100 and state draining\n")


def test_no_token_is_refused_as_every_command_is(gpuctl, cluster, live_server):
    for command in ("queues", "nodes", "list"):
        code, out, err = gpuctl(None, command)
        assert (code, out) == (1, "")
        assert err == (
            "gpuctl: refused (HTTP 401)\n  detail: Authentication credentials were not provided.\n"
            f"  no API token was given: set GPUCTL_TOKEN or pass --token; POST {live_server.url}/api/v1/auth-token/ "
            "with -d username=... --data-urlencode 'password=...' issues one (README, gpuctl), or the admin does\n")


def test_bad_usage_is_argparses_exit_2(capsys):
    from gpuplatform.cli import main

    for argv in (["queues", "--bogus"], ["queues", "alpha"], ["nodes", "--state"], ["nodes", "--gpus", "3"]):
        assert main(["--api", "http://127.0.0.1:9", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("usage: gpuctl") and "error:" in err
