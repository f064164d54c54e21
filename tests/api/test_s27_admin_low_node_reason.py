"""Session 27, an admin's trial (item 3): `gpuctl nodes` showed a ready node's stale last reason ("check /bin/true:
exit 0; output:", "returned to ready by admin") in REASON while the nodes page showed "—". gpuctl now shows the reason
by the page's rule (models.Node.out_of_service_reason), so the two agree."""
from __future__ import annotations

import itertools
import re

import pytest
from django.test import Client

from gpuplatform.cli import _node_line
from gpuplatform.models import Node

STATES = [s.value for s in Node.State]


@pytest.mark.parametrize("state", STATES)
def test_reason_is_the_pages_for_every_state_and_reason(state):
    for moved, health, spare in itertools.product(("", "returned to ready by admin"), ("", "xid 79 on gpu3"),
                                                  (False, True)):
        page = Node(name="n", flavor="H100", gpu_count=8, state=state, state_reason=moved,
                    health_reason=health).out_of_service_reason
        line = _node_line({"name": "n", "flavor": "H100", "state": state, "gpu_count": 8, "allocated_gpus": 0,
                           "domain": None, "gpus": [], "state_reason": moved, "health_reason": health,
                           "spare": spare})
        assert line[7] == "; ".join(w for w in ("hot spare" if spare else "", page) if w), (state, moved, health)


def test_a_ready_nodes_stale_reason_is_not_shown(users, admin):
    from gpuplatform import services

    node = Node.objects.get(name="n1")
    services.cordon_node(node, reason="fan swap")
    node.refresh_from_db()
    services.uncordon_node(node)
    node.refresh_from_db()
    assert node.state == "ready" and node.state_reason, node.state_reason  # the stale reason the API still gives
    api = {n["name"]: n for n in admin.get("/api/v1/nodes/").json()["results"]}
    assert api["n1"]["state_reason"] == node.state_reason
    page = Client()
    page.force_login(users["staff"])
    html = page.get("/nodes/").content.decode()
    cells = dict(re.findall(r'<tr data-node="([^"]+)">.*?<td class="reason">([^<]*)</td>', html, re.S))
    assert cells["n1"] == "—"
    assert _node_line(api["n1"])[7] == ""  # gpuctl: no reason either (the line ends at DOMAIN)
    # a cordoned node: both show its reason
    services.cordon_node(Node.objects.get(name="n2"), reason="fan swap")
    api = {n["name"]: n for n in admin.get("/api/v1/nodes/").json()["results"]}
    cells = dict(re.findall(r'<tr data-node="([^"]+)">.*?<td class="reason">([^<]*)</td>',
                            page.get("/nodes/").content.decode(), re.S))
    assert cells["n2"] == _node_line(api["n2"])[7] == "fan swap"
