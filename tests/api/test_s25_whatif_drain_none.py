"""A what-if's drain_nodes with no node (new-user trial 25, F4): "nodes": [] was DRF's "Ensure this field has at
least 1 elements."; it is a sentence naming the change and the rule, as the change's other refusals are (a node
named twice: test_trialfix18a)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_drain_of_no_node_names_the_rule(admin):
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "drain_nodes", "nodes": []}]}, format="json")
    assert r.status_code == 400 and r.json() == {
        "changes[0].nodes": ["drain_nodes needs at least one node: give at least one node name in nodes"]}, r.content


def test_a_drain_of_too_many_nodes_names_the_bound(admin):
    nodes = [f"n{i}" for i in range(10001)]
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "drain_nodes", "nodes": nodes}]}, format="json")
    assert r.status_code == 400 and r.json() == {
        "changes[0].nodes": ["drain_nodes takes at most 10000 nodes per change"]}, r.content
