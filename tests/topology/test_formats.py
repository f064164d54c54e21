"""Topology importers on the shipped real files (data/topology/) and on our own Slurm fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterspec.importers.errors import ImportFormatError
from clusterspec.importers.topology import (
    compress_hostlist, expand_hostlist, levels_from_volcano_config, parse_hypernode, parse_ibnetdiscover,
    parse_k8s_labels, parse_kueue, parse_slurm_conf, parse_slurm_yaml, parse_topograph_model, parse_topology_file,
)

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "topology"
SHARED = REPO.parent / "shared" / "data" / "topology"

# Our own fixtures in the documented topology.conf syntax (not copied from the Slurm man page).
TREE_CONF = """\
# two racks of GPU servers under one core switch
SwitchName=leafA Nodes=gpu[001-004]
SwitchName=leafB Nodes=gpu[005-006],gpu010   # a comment after a statement
SwitchName=core Switches=leafA,leafB LinkSpeed=400
"""
BLOCK_CONF = """\
BlockName=nvlA Nodes=trn[01-04]
BlockName=nvlB Nodes=trn[05-08]
BlockName=nvlC Nodes=trn[09-12]
BlockName=nvlD Nodes=trn[13-16]
BlockName=nvlE Nodes=trn[17-20]
BlockSizes=4,8
"""


def test_expand_hostlist():
    assert expand_hostlist("node[01-03,20],gpu[1-2]") == ["node01", "node02", "node03", "node20", "gpu1", "gpu2"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("[1101-1102]") == ["1101", "1102"]
    for bad in ("node[1-", "node[3-1]", "n[a-b]", "a,,b", "x]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


@pytest.mark.parametrize("names", [["n01", "n02", "n03", "x7"], ["n9", "n10", "n11", "n13"], ["a", "b1", "b01"]])
def test_compress_hostlist_inverts_expand(names):
    assert sorted(expand_hostlist(compress_hostlist(names))) == sorted(set(names))


def test_slurm_tree_fixture():
    spec = parse_slurm_conf(TREE_CONF, file="t.conf")
    assert spec.tiers() == {2: 2, 3: 1}
    assert spec.domain("leafA").parent == "core" and spec.domain("core").tier == 3
    assert spec.node_counts() == {"core": 7, "leafA": 4, "leafB": 3}


def test_slurm_block_fixture_aggregates_consecutive_blocks():
    spec = parse_slurm_conf(BLOCK_CONF, file="b.conf")
    assert spec.tiers() == {1: 5, 2: 2}
    assert spec.domain("nvlA").parent == "nvlA..nvlB" and spec.domain("nvlE").parent is None
    assert spec.node_counts()["nvlC..nvlD"] == 8


@pytest.mark.parametrize("text, line, reason", [
    ("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2\n", 2, "node 'n2' is in two domains"),
    ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", 2, "duplicate domain 'a'"),
    ("SwitchName=a Nodes=n1\nSwitchName=top Switches=a,ghost\n", 2, "unknown switch 'ghost'"),
    ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", None, "cycle in the domain tree"),
    ("SwitchName=a Nodes=n[1-\n", 1, "unbalanced"),
    ("SwitchName=a Nodes=n1 Colour=red\n", 1, "unknown key"),
    ("SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n", 2, "mixes SwitchName"),
    ("SwitchName=a Nodes=n1\nSwitchName=t1 Switches=a\nSwitchName=t2 Switches=a\n", 3, "listed under both"),
    ("RingName=r Nodes=n[1-4]\n", 1, "topology/ring"),
])
def test_slurm_conf_refuses_with_line_and_reason(text, line, reason):
    with pytest.raises(ImportFormatError) as exc:
        parse_slurm_conf(text, file="bad.conf")
    assert reason in str(exc.value)
    assert exc.value.file == "bad.conf"
    if line is not None:
        assert exc.value.line == line


def test_unknown_node_against_inventory():
    with pytest.raises(ImportFormatError, match="line 3: unknown node 'gpu010'"):
        parse_slurm_conf(TREE_CONF, file="t.conf", inventory=[f"gpu{i:03d}" for i in range(1, 7)])


def test_slurm_yaml_fixture():
    text = """\
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: top
        children: l[1-2]
      - switch: l1
        nodes: h[1-2]
      - switch: l2
        nodes: h[3-4]
- topology: nvl
  block:
    block_sizes: [2, 4]
    blocks:
      - block: b1
        nodes: h[1-2]
      - block: b2
        nodes: h[3-4]
"""
    tree = parse_slurm_yaml(text)
    assert tree.tiers() == {2: 2, 3: 1} and tree.node_counts()["top"] == 4
    block = parse_slurm_yaml(text, topology="nvl")
    assert block.tiers() == {1: 2, 2: 1} and block.domain("b1").parent == "b1..b2"
    with pytest.raises(ImportFormatError, match=r"line 9: node 'h1' is in two domains: 'l1' \(line 7\)"):
        parse_slurm_yaml(text.replace("nodes: h[3-4]\n- topology", "nodes: h[1-4]\n- topology", 1))


@pytest.mark.skipif(not (SHARED / "slurm").is_dir(), reason="../shared/data/topology/slurm not present")
def test_schedmd_examples_from_shared():
    tree = parse_topology_file(SHARED / "slurm" / "schedmd_topology_tree.conf", "slurm-conf")
    assert tree.tiers() == {2: 3, 3: 1} and tree.node_counts() == {"s3": 18, "s0": 6, "s1": 6, "s2": 6}
    block = parse_topology_file(SHARED / "slurm" / "schedmd_topology_block.conf", "slurm-conf")
    assert block.tiers() == {1: 4, 2: 1} and block.node_counts()["block1..block4"] == 128
    with pytest.raises(ImportFormatError, match="RingName"):
        parse_topology_file(SHARED / "slurm" / "schedmd_topology_ring.conf", "slurm-conf")
    yml = parse_topology_file(SHARED / "slurm" / "schedmd_topology.yaml", "slurm-yaml")
    assert yml.node_counts() == {"sw_root": 4}
    blocks = parse_topology_file(SHARED / "slurm" / "schedmd_topology.yaml", "slurm-yaml", topology="topo2")
    assert blocks.tiers() == {1: 4, 2: 1} and blocks.node_counts()["b1..b4"] == 16
    assert parse_topology_file(SHARED / "slurm" / "schedmd_topology.yaml", "slurm-yaml", topology="topo3").domains == ()


def test_volcano_hypernodes():
    spec = parse_topology_file(DATA / "volcano" / "hypernodes_tree_s0-s6.yaml", "hypernode")
    assert spec.tiers() == {1: 4, 2: 2, 3: 1}
    assert spec.node_counts() == {"s6": 8, "s4": 4, "s5": 4, "s0": 2, "s1": 2, "s2": 2, "s3": 2}
    assert spec.node_domain["node-7"] == "s3" and spec.domain("s3").parent == "s5"


HN = """\
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: rack1}
spec:
  tier: 1
  members:
  - type: Node
    selector: {regexMatch: {pattern: "^gpu-a"}}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: rack2}
spec:
  tier: 1
  members:
  - type: Node
    selector: {labelMatch: {matchLabels: {rack: "2"}}}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: spine}
spec:
  tier: 2
  members:
  - {type: HyperNode, selector: {exactMatch: {name: rack1}}}
  - {type: HyperNode, selector: {exactMatch: {name: rack2}}}
"""


def test_hypernode_regex_and_label_members_resolve_against_inventory():
    inv = {"gpu-a1": {}, "gpu-a2": {}, "gpu-b1": {"rack": "2"}, "gpu-b2": {"rack": "2"}, "cpu-1": {}}
    spec = parse_hypernode(HN, inventory=inv)
    assert spec.node_counts() == {"spine": 4, "rack1": 2, "rack2": 2}
    with pytest.raises(ImportFormatError, match="line 7: .*node inventory is needed"):
        parse_hypernode(HN)
    with pytest.raises(ImportFormatError, match="in two domains"):
        parse_hypernode(HN, inventory={"gpu-a1": {"rack": "2"}})
    bad = HN.replace("name: rack2}}}", "name: rack3}}}")
    with pytest.raises(ImportFormatError, match=r"line 2[0-9]: .*'rack3' is not declared"):
        parse_hypernode(bad, inventory=inv)
    with pytest.raises(ImportFormatError, match="tier 1.* is not higher"):
        parse_hypernode(HN.replace("tier: 2", "tier: 1"), inventory=inv)


def test_kueue_topology_with_node_labels():
    inv = {f"h{b}{r}{i}": {"cloud.provider.com/topology-block": f"b{b}", "cloud.provider.com/topology-rack": f"r{r}",
                           "kubernetes.io/hostname": f"h{b}{r}{i}"} for b in range(2) for r in range(2) for i in range(4)}
    inv["unlabelled"] = {}
    spec = parse_topology_file(DATA / "kueue" / "tas_sample_gpu_queues.yaml", "kueue", inventory=inv)
    assert spec.tiers() == {2: 4, 3: 2}
    assert spec.node_counts()["b0"] == 8 and spec.node_counts()["b1/r0"] == 4
    assert spec.domain("b1/r0").parent == "b1" and "unlabelled" not in spec.node_domain
    one = parse_topology_file(DATA / "kueue" / "tas_sample_gpu_queues.yaml", "kueue", inventory=inv, lowest_tier=1)
    assert one.tiers() == {1: 4, 2: 2}
    with pytest.raises(ImportFormatError, match="node inventory with labels is needed"):
        parse_topology_file(DATA / "kueue" / "tas_sample_gpu_queues.yaml", "kueue")


def _node_list(rows) -> str:
    import yaml
    return yaml.safe_dump({"apiVersion": "v1", "kind": "NodeList",
                           "items": [{"metadata": {"name": n, "labels": labels}} for n, labels in rows]})


def test_k8s_labels_use_the_keys_of_the_label_table():
    import csv
    with open(DATA / "k8s-node-labels" / "gpu_topology_node_labels.csv", newline="") as fh:
        table = {r["label_key"]: r for r in csv.DictReader(fh)}
    clique = table["nvidia.com/gpu.clique"]["example_value"]  # ClusterUUID.CliqueID from the GFD docs
    uuid = clique.rsplit(".", 1)[0]
    rows = [(f"gb-{i:02d}", {"nvidia.com/gpu.clique": f"{uuid}.{i // 4}", "volcano.sh/tor": f"tor{i // 8}",
                             "volcano.sh/hypercluster": "hc0", "nvidia.com/gpu.product": "NVIDIA-GB200"})
            for i in range(16)]
    spec = parse_k8s_labels(_node_list(rows))
    assert spec.tiers() == {1: 4, 2: 2, 3: 1}
    assert spec.node_counts()[clique] == 4 and spec.node_counts()["tor1"] == 8 and spec.node_counts()["hc0"] == 16
    for key, row in table.items():  # every switch / NVLink level key of the table has a tier here
        level = row["level"]
        if key in ("kubernetes.io/hostname", "accelerator.topograph.run/sub-domain", "fabric.topograph.run/tier-N",
                   "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "cloud.google.com/gce-topology-host"):
            continue
        if any(w in level for w in ("NVLink", "switch", "network", "rack", "ToR", "block", "domain", "reservation", "hyper")):
            from clusterspec.importers.topology.k8s_labels import KNOWN_TIERS
            assert any(key in keys for keys in KNOWN_TIERS.values()), key
    rows[3][1]["volcano.sh/tor"] = "tor1"  # clique .0 now sits under two ToRs
    with pytest.raises(ImportFormatError, match="listed under both"):
        parse_k8s_labels(_node_list(rows))


def test_volcano_label_discovery_config_gives_levels():
    text = (DATA / "volcano" / "hypernode_discovery_configmap.yaml").read_text()
    assert levels_from_volcano_config(text) == ["volcano.sh/tor", "kubernetes.io/hostname"]
    levels = levels_from_volcano_config(text, "topologyA3")
    rows = [(f"n{i}", {"volcano.sh/hypercluster": "c1", "volcano.sh/hypernode": f"hn{i // 2}"}) for i in range(4)]
    spec = parse_k8s_labels(_node_list(rows), levels=levels)
    assert spec.tiers() == {1: 2, 3: 1} and spec.node_counts()["c1"] == 4


def test_ibnetdiscover_real_fabric():
    spec = parse_topology_file(DATA / "topograph" / "ib" / "ibnetdiscover_example.out", "ibnetdiscover")
    assert spec.tiers() == {2: 8, 3: 1}  # 8 rack groups of leaves under one spine group
    assert len(spec.node_domain) == 119
    counts = spec.node_counts()
    assert counts["A10-P1-IBSPINE-01+8"] == 119
    groups = {d.name: counts[d.name] for d in spec.domains if d.tier == 2}
    assert sum(groups.values()) == 119 and max(groups.values()) == 18
    for group in groups:  # every rack group holds the hosts of one dgx-NN rack
        racks = {n.split("-c")[0] for n in spec.direct_nodes(group)}
        assert len(racks) == 1, (group, racks)
    assert any("31 switch(es) in 8 group(s)" in n for n in spec.notes)
    assert "localhost" not in spec.node_domain and "B11-P1-CUFM-02" not in spec.node_domain


def test_ibnetdiscover_refuses_garbage():
    with pytest.raises(ImportFormatError, match="no Switch block"):
        parse_ibnetdiscover("hello\n")
    with pytest.raises(ImportFormatError, match="line 1: port line outside"):
        parse_ibnetdiscover('[1]\t"S-1"[2]\t\t# "x"\n')


@pytest.mark.parametrize("name, tiers, nodes", [
    ("small-tree.yaml", {1: 2, 2: 2, 3: 1}, 6),
    ("medium.yaml", {1: 4, 2: 4, 3: 2, 4: 1}, 8),
    ("nvl72.yaml", {1: 4, 2: 4, 3: 2, 4: 1}, 72),
    ("dual-xclr-regular.yaml", {2: 12, 3: 6, 4: 1}, 96),
    ("dual-xclr-irregular.yaml", {2: 31, 3: 2, 4: 1}, 255),
])
def test_topograph_models(name, tiers, nodes):
    spec = parse_topology_file(DATA / "topograph" / "models" / name, "topograph")
    assert spec.tiers() == tiers and len(spec.node_domain) == nodes
    if name == "nvl72.yaml":
        assert spec.node_counts()["nvl-1-1"] == 18 and spec.domain("nvl-1-1").parent == "leaf-1-1"


def test_yaml_syntax_error_names_the_line():
    with pytest.raises(ImportFormatError, match="line 4: not valid YAML"):
        parse_hypernode("kind: HyperNode\nmetadata:\n  name: [a\n")
    with pytest.raises(ImportFormatError):
        parse_topograph_model("- a\n")


def test_empty_file_and_absurd_tier_are_refused(tmp_path):
    from clusterspec.importers.errors import ImportFormatError
    from clusterspec.importers.topology import parse_topology_file

    empty = tmp_path / "empty.yaml"
    empty.write_text("  \n")
    with pytest.raises(ImportFormatError, match="empty"):
        parse_topology_file(empty, "hypernode")
    huge = tmp_path / "huge.yaml"
    huge.write_text("apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: s0}\nspec:\n"
                    "  tier: 9223372036854775808\n  members:\n  - type: Node\n    selector: {exactMatch: {name: n0}}\n")
    with pytest.raises(ImportFormatError, match="tier must be an integer from 1 to 32767"):
        parse_topology_file(huge, "hypernode")
