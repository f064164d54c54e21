"""Importers of real cluster inventories and job traces (pure parsers: no Django, no DB writes).

One module per format: `philly` (Microsoft Philly, ATC '19) and `openb` (Alibaba GPU trace v2023,
ATC '23). They return the neutral dataclasses of `clusterspec.spec` and raise
`ImportFormatError` (file, line, column, rule) on malformed input.

The registry below resolves the shipped files under DATA_DIR (the repository's `data/` folder, see
data/README.md) so that the replay command and the database loader only need a name:

    load_cluster("philly", scale=0.5)      load_trace("philly", until_days=30)
    load_cluster("openb")                  load_trace("openb")

Options (`**opts`) are passed to the format's loader as keywords; a path option overrides the
shipped file.
"""
from __future__ import annotations

from pathlib import Path

from .errors import ImportFormatError

DATA_DIR = Path(__file__).resolve().parents[2] / "data"

PHILLY_DIR = DATA_DIR / "philly"
OPENB_DIR = DATA_DIR / "alibaba-openb-fgd"
CLUSTERS = ("philly", "openb")
TRACES = ("philly", "openb")

__all__ = ["DATA_DIR", "CLUSTERS", "TRACES", "ImportFormatError", "load_cluster", "load_trace"]


def load_cluster(name: str, **opts):
    """ClusterSpec of a shipped cluster: "philly" or "openb"."""
    if name == "philly":
        from .philly import load_philly_cluster

        machines = opts.pop("path_machine_list", PHILLY_DIR / "philly_cluster_machine_list.csv")
        vcs = opts.pop("path_vc_nodes", PHILLY_DIR / "philly_vc_nodes.csv")
        return load_philly_cluster(machines, vcs, **opts)
    if name == "openb":
        from .openb import load_openb_cluster

        nodes = opts.pop("path_node_csv", OPENB_DIR / "nodes" / "openb_node_list_gpu_node.csv")
        opts.setdefault("path_pod_csv", OPENB_DIR / "pods" / "openb_pod_list_default.csv")
        return load_openb_cluster(nodes, **opts)
    raise ValueError(f"unknown cluster {name!r}; known: {', '.join(CLUSTERS)}")


def load_trace(name: str, **opts):
    """Trace of a shipped workload: "philly" or "openb" (the openb default pod list)."""
    if name == "philly":
        from .philly import load_philly_trace

        return load_philly_trace(opts.pop("path_jobs", PHILLY_DIR / "philly_jobs_pollux.csv"), **opts)
    if name in ("openb", "openb-default"):
        from .openb import load_openb_trace

        path = opts.pop("path_pod_csv", OPENB_DIR / "pods" / "openb_pod_list_default.csv")
        return load_openb_trace(path, **opts)
    raise ValueError(f"unknown trace {name!r}; known: {', '.join(TRACES)}")
