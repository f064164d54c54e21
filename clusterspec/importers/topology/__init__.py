"""Topology importers and exporters: real topology formats <-> a `TopologySpec` domain tree.

Tier convention (DESIGN.md section 4): 1 = NVLink / scale-up domain, 2 = leaf switch, 3 = spine, higher
above. Formats (`FORMATS`, the names `manage.py import_topology --format` takes):

| format        | module          | reads                                             | tiers                      |
|---------------|-----------------|---------------------------------------------------|----------------------------|
| slurm-conf    | slurm_conf      | topology.conf tree (SwitchName) / block (BlockName)| leaf 2, up +1; blocks 1    |
| slurm-yaml    | slurm_yaml      | topology.yaml (tree / block / flat)               | as slurm-conf              |
| hypernode     | hypernode       | Volcano HyperNode CRs                             | spec.tier                  |
| kueue         | kueue           | Kueue Topology levels + node labels               | known labels, else 2 up    |
| k8s-labels    | k8s_labels      | kubectl node list with GFD / topology labels      | gpu.clique 1, ToR 2, ...   |
| ibnetdiscover | ibnetdiscover   | InfiniBand fabric dump                            | leaf groups 2, spines 3    |
| topograph     | topograph       | NVIDIA topograph cluster model YAML               | NVL 1, leaf 2, up +1       |

Exporters: `to_hypernode_yaml(spec)`, `to_slurm_conf(spec)`. Every parser raises
`ImportFormatError` (file, line, reason) and returns nothing on error.
"""
from __future__ import annotations

import os

from ..errors import ImportFormatError

from .hostlist import compress_hostlist, expand_hostlist
from .hypernode import parse_hypernode, to_hypernode_yaml
from .ibnetdiscover import parse_ibnetdiscover
from .k8s_labels import levels_from_volcano_config, parse_k8s_labels, read_node_list
from .kueue import parse_kueue
from .slurm_conf import parse_slurm_conf, to_slurm_conf
from .slurm_yaml import parse_slurm_yaml
from .spec import TopologySpec, TreeBuilder
from .topograph import parse_topograph_model

__all__ = ["FORMATS", "EXPORTERS", "parse_topology_file", "TopologySpec", "TreeBuilder", "expand_hostlist",
           "compress_hostlist", "parse_slurm_conf", "parse_slurm_yaml", "parse_hypernode", "parse_kueue",
           "parse_k8s_labels", "parse_ibnetdiscover", "parse_topograph_model", "to_hypernode_yaml",
           "to_slurm_conf", "read_node_list", "levels_from_volcano_config"]

FORMATS = {
    "slurm-conf": parse_slurm_conf,
    "slurm-yaml": parse_slurm_yaml,
    "hypernode": parse_hypernode,
    "kueue": parse_kueue,
    "k8s-labels": parse_k8s_labels,
    "ibnetdiscover": parse_ibnetdiscover,
    "topograph": parse_topograph_model,
}

EXPORTERS = {"hypernode": to_hypernode_yaml, "slurm-conf": to_slurm_conf}


def parse_topology_file(path, fmt: str, *, inventory=None, **options) -> TopologySpec:
    """Read `path` (UTF-8) as `fmt` (a key of FORMATS). Raises KeyError for an unknown format and
    ImportFormatError for bad content."""
    parser = FORMATS[fmt]
    name = os.path.basename(os.fspath(path))
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise ImportFormatError(name, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise ImportFormatError(name, None, None, "the file is empty")
    return parser(text, file=name, inventory=inventory, **options)
