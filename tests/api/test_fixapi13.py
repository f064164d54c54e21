"""New-user trial 13 findings on the API (notes/fixapi13.md): node names under the one name rule (F2), the
auth-token endpoint as strict as the rest of the API (F3), log chunks at absurd offsets (F4), heartbeat clocks
(F13), the requeue wording (F9), both spellings of a task in the logs API (F8), set-quota (F16) and quota
flavors / queue types (F11)."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from gpuplatform import services
from gpuplatform.models import Node
from gpuplatform.names import name_error

BAD_NODE_NAMES = ["../../etc/x y", "a/b", "x y", "nöde", ".hidden", "-dash", "a" * 201]
INVENTORY = {"flavor": "H200", "gpus": [{"index": 0}]}


# --- F2: node names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BAD_NODE_NAMES)
def test_registering_a_node_under_a_name_no_url_can_hold_is_refused(client_for, name):
    before = Node.objects.count()
    r = client_for("agent").post("/api/v1/nodes/register/", {"name": name, **INVENTORY}, format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"name": [name_error("node", name)]}
    assert "letters, digits, '.', '_' and '-'" in name_error("node", name) or "at most 200" in name_error("node", name)
    assert Node.objects.count() == before


def test_a_registered_node_is_addressable_by_its_per_node_urls(client_for, admin):
    r = client_for("agent").post("/api/v1/nodes/register/", {"name": "gpu-07.rack_2", **INVENTORY}, format="json")
    assert r.status_code == 201, r.content
    assert admin.get("/api/v1/nodes/gpu-07.rack_2/").status_code == 200
    assert admin.post("/api/v1/nodes/gpu-07.rack_2/cordon/", {"reason": "t"}, format="json").json()["state"] == "cordoned"


@pytest.mark.parametrize("name", ["../../etc/x y", "", " "])
def test_the_node_service_refuses_the_same_names(cluster, name):
    with pytest.raises(services.ValidationError) as err:
        services.register_node(name, flavor="H200", gpus=[{"index": 0}])
    assert err.value.errors["name"] == name_error("node", name)


def test_a_cluster_file_with_a_bad_node_name_loads_nothing(db):
    from clusterspec.spec import ClusterSpec, NodeSpec

    spec = ClusterSpec("t", nodes=(NodeSpec("ok-0", "H200", 2), NodeSpec("bad node", "H200", 2)), domains=(),
                       queues=())
    with pytest.raises(services.ValidationError) as err:
        services.load_cluster_spec(spec)
    assert err.value.errors == {"nodes[1].name": name_error("node", "bad node")}
    assert not Node.objects.exists()


def test_the_admin_node_form_holds_the_rule(cluster):
    from gpuplatform.admin import NodeForm

    node = Node.objects.first()
    data = {"name": "x/y", "flavor": node.flavor, "gpu_count": node.gpu_count, "cpu_milli": 0, "memory_mib": 0,
            "labels": "{}", "resume_state": "", "executor": node.executor}
    form = NodeForm(data=data, instance=node)
    assert not form.is_valid()
    assert form.errors["name"] == [name_error("node", "x/y")]


def test_the_agent_refuses_a_bad_node_name_before_it_sends_anything():
    with pytest.raises(CommandError, match=r"--node-name '\.\./\.\./etc/x y': a node name uses"):
        call_command("gpu_agent", "--api", "http://127.0.0.1:9", "--token", "t", "--once",
                     "--node-name", "../../etc/x y", stdout=io.StringIO())
