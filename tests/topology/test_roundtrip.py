"""Export -> import gives the same tree (HyperNode YAML and Slurm topology.conf tree form)."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterspec.importers.topology import (
    parse_hypernode, parse_slurm_conf, parse_topology_file, to_hypernode_yaml, to_slurm_conf,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "topology"

CASES = [
    ("volcano/hypernodes_tree_s0-s6.yaml", "hypernode"),
    ("topograph/ib/ibnetdiscover_example.out", "ibnetdiscover"),
    ("topograph/models/nvl72.yaml", "topograph"),
    ("topograph/models/medium.yaml", "topograph"),
    ("topograph/models/dual-xclr-irregular.yaml", "topograph"),
]


@pytest.mark.parametrize("path, fmt", CASES)
def test_hypernode_round_trip(path, fmt):
    spec = parse_topology_file(DATA / path, fmt)
    again = parse_hypernode(to_hypernode_yaml(spec))
    assert again.canonical() == spec.canonical()


@pytest.mark.parametrize("path, fmt", CASES)
def test_slurm_conf_round_trip(path, fmt):
    spec = parse_topology_file(DATA / path, fmt)
    text = to_slurm_conf(spec)
    again = parse_slurm_conf(text)
    assert again.canonical() == spec.canonical()
    assert to_slurm_conf(again) == text


def test_slurm_conf_export_lists_children_and_nodes():
    spec = parse_topology_file(DATA / "topograph/models/small-tree.yaml", "topograph")
    lines = to_slurm_conf(spec).splitlines()
    assert "# gpuplatform: leaf_tier=1" in lines
    assert "SwitchName=nvl2 Nodes=I[21-22,25]" in lines and "SwitchName=S1 Switches=S[2-3]" in lines
