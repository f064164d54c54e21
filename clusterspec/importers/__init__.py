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

__all__ = ["DATA_DIR", "CLUSTERS", "TRACES", "ImportFormatError", "load_cluster", "load_trace", "load_trace_file",
           "trace_format"]


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


def trace_format(path) -> str:
    """"philly" or "openb": which importer reads the CSV at `path`, told by its header. Philly format (the
    documented CSV for one's own trace): `timestamp,duration,num_gpus,gpu_time,cluster`, one gang job a row
    (submit time `YYYY-MM-DD HH:MM:SS`, run time in seconds, GPUs, GPU-seconds, queue name). Raises
    ImportFormatError (file, line 1, the columns each format needs) for anything else, or for a missing
    or unreadable file."""
    import csv

    from .openb import POD_COLUMNS
    from .philly import JOB_COLUMNS

    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            header = [h.strip() for h in next(csv.reader(fh), [])]
    except FileNotFoundError:
        raise ImportFormatError(path, None, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFormatError(path, None, None, f"cannot read it: {exc}") from None
    if all(c in header for c in JOB_COLUMNS):
        return "philly"
    if all(c in header for c in POD_COLUMNS):
        return "openb"
    raise ImportFormatError(path, 1, None, f"not a trace this product reads: a Philly-format header has "
                                           f"{', '.join(JOB_COLUMNS)}; an openb pod list has "
                                           f"{', '.join(POD_COLUMNS)} (header has: {', '.join(header) or 'nothing'})")


def load_trace_file(path, **opts):
    """A trace from one's own CSV file, in Philly or openb format (trace_format). Options as load_trace."""
    fmt = trace_format(path)
    name = Path(path).stem
    if fmt == "philly":
        from .philly import load_philly_trace

        return load_philly_trace(path, name=name, **opts)
    from .openb import load_openb_trace

    opts.pop("compress", None)
    return load_openb_trace(path, name=name)
