"""Malformed input: ImportFormatError names the file, the line and the column; nothing is returned."""
from __future__ import annotations

import pytest

from clusterspec.importers import DATA_DIR, ImportFormatError, load_cluster, load_trace
from clusterspec.importers.openb import load_openb_cluster, load_openb_trace
from clusterspec.importers.philly import load_philly_cluster, load_philly_trace

JOBS = DATA_DIR / "philly" / "philly_jobs_pollux.csv"
MACHINES = DATA_DIR / "philly" / "philly_cluster_machine_list.csv"
VCS = DATA_DIR / "philly" / "philly_vc_nodes.csv"
PODS = DATA_DIR / "alibaba-openb-fgd" / "pods" / "openb_pod_list_default.csv"
NODES = DATA_DIR / "alibaba-openb-fgd" / "nodes" / "openb_node_list_gpu_node.csv"


def slice_with(src, dst, rows: int, replace_line: int | None = None, transform=None):
    """First `rows` data lines of src; the physical line `replace_line` (1-based) goes through transform."""
    with open(src, newline="") as handle:
        lines = handle.readlines()[: rows + 1]
    if replace_line is not None:
        lines[replace_line - 1] = transform(lines[replace_line - 1])
    dst.write_text("".join(lines))
    return dst


def test_philly_bad_num_gpus(tmp_path):
    def bad(line):
        cells = line.split(",")
        cells[2] = "x"
        return ",".join(cells)
    path = slice_with(JOBS, tmp_path / "philly_jobs_pollux.csv", 50, replace_line=17, transform=bad)
    with pytest.raises(ImportFormatError) as info:
        load_philly_trace(path)
    assert str(info.value) == "philly_jobs_pollux.csv line 17, column num_gpus: expected a positive integer, got 'x'"
    assert (info.value.file, info.value.line, info.value.column) == ("philly_jobs_pollux.csv", 17, "num_gpus")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value, column", [("0", "num_gpus"), ("-5.0", "duration"), ("nan", "duration"),
                                           ("2017-13-01 00:00:00", "timestamp")])
def test_philly_rule_violations(tmp_path, value, column):
    index = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"].index(column)

    def bad(line):
        cells = line.split(",")
        cells[index] = value
        return ",".join(cells)
    path = slice_with(JOBS, tmp_path / "jobs.csv", 10, replace_line=4, transform=bad)
    with pytest.raises(ImportFormatError, match=rf"^jobs\.csv line 4, column {column}: "):
        load_philly_trace(path)


def test_philly_missing_column(tmp_path):
    path = slice_with(JOBS, tmp_path / "jobs.csv", 5, replace_line=1,
                      transform=lambda line: line.replace("num_gpus", "gpus"))
    with pytest.raises(ImportFormatError, match=r"^jobs\.csv line 1: missing required column\(s\) num_gpus"):
        load_philly_trace(path)


def test_duplicate_header_column(tmp_path):
    """A column named twice was read silently, the last one winning (new-user trial 14, F18)."""
    path = tmp_path / "dupcol.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster,cluster\n2017-10-01 00:00:00,100,2,200,vc1,vc2\n")
    with pytest.raises(ImportFormatError, match=r"^dupcol\.csv line 1, column cluster: column cluster given twice") as info:
        load_philly_trace(path)
    assert (info.value.line, info.value.column) == (1, "cluster")
    # an unused column twice (here with spaces around the name) is refused too, as is an empty name twice
    spaced = tmp_path / "spaced.csv"
    spaced.write_text("timestamp,duration,num_gpus,gpu_time,cluster,x, x \n2017-10-01 00:00:00,100,2,200,vc1,1,2\n")
    with pytest.raises(ImportFormatError, match=r"column x given twice"):
        load_philly_trace(spaced)
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp,duration,num_gpus,gpu_time,cluster,,\n2017-10-01 00:00:00,100,2,200,vc1,,\n")
    with pytest.raises(ImportFormatError, match=r"column \(empty name\) given twice"):
        load_philly_trace(empty)
    for loader, name, header in [(load_openb_trace, "pods.csv", "name,name"), (load_openb_cluster, "nodes.csv", "sn,sn")]:
        bad = tmp_path / name
        bad.write_text(header + "\n")
        with pytest.raises(ImportFormatError, match=rf"^{name} line 1, column \w+: column \w+ given twice"):
            loader(bad)


def test_empty_files(tmp_path):
    for loader, name in [(load_philly_trace, "philly_jobs_pollux.csv"), (load_openb_trace, "pods.csv"),
                         (load_openb_cluster, "nodes.csv")]:
        path = tmp_path / name
        path.write_text("")
        with pytest.raises(ImportFormatError, match=rf"^{name} line 1: empty file: expected a header"):
            loader(path)


def test_machine_list_bad_gpu_count_and_duplicate(tmp_path):
    path = slice_with(MACHINES, tmp_path / "philly_cluster_machine_list.csv", 20, replace_line=5,
                      transform=lambda line: line.replace(",2,", ",two,"))
    with pytest.raises(ImportFormatError) as info:
        load_philly_cluster(path, VCS)
    assert str(info.value).startswith(
        "philly_cluster_machine_list.csv line 5, column number of GPUs: expected a positive integer, got 'two'")
    dup = slice_with(MACHINES, tmp_path / "m.csv", 20, replace_line=6, transform=lambda line: "m0,2, 12GB\n")
    with pytest.raises(ImportFormatError, match=r"^m\.csv line 6, column machineId: duplicate"):
        load_philly_cluster(dup, VCS)


def test_vc_nodes_bad_count(tmp_path):
    path = slice_with(VCS, tmp_path / "philly_vc_nodes.csv", 11, replace_line=3,
                      transform=lambda line: line.split(",")[0] + ",many\n")
    with pytest.raises(ImportFormatError, match=r"^philly_vc_nodes\.csv line 3, column node num: expected a non-negative"):
        load_philly_cluster(MACHINES, path)


def test_wrong_field_count(tmp_path):
    path = slice_with(JOBS, tmp_path / "jobs.csv", 10, replace_line=8, transform=lambda line: "2017-10-09 07:01:55,1\n")
    with pytest.raises(ImportFormatError, match=r"^jobs\.csv line 8: expected 5 fields"):
        load_philly_trace(path)


def test_openb_bad_values(tmp_path):
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    cases = [
        ("p,1,1,1,0,,LS,Running,0,5,0\n", "gpu_milli", "expected 1..1000 for a GPU pod"),
        ("p,1,1,1,1000,,Gold,Running,0,5,0\n", "qos", "expected one of LS, BE, Burstable, Guaranteed"),
        ("p,1,1,1,1000,A||B,LS,Running,0,5,0\n", "gpu_spec", "expected GPU models"),
        ("p,1,1,1,1000,,LS,Running,9,5,0\n", "deletion_time", "expected >= creation_time 9"),
        ("p,1,1,1.5,1000,,LS,Running,0,5,0\n", "num_gpu", "expected a non-negative integer, got '1.5'"),
        # the bounds a Philly row holds too (new-user trial 13, F6)
        ("p,1,1,1,1000,,LS,Running,0,31622401,0\n", "deletion_time", "expected at most 31,622,400 seconds (366 days)"),
        ("p,1,1,1,1000,,LS,Running,0,99999999999999999999,0\n", "deletion_time", "expected an integer <= 316,224,000"),
        ("p,1,1,99999,1000,,LS,Running,0,5,0\n", "num_gpu", "expected an integer <= 65,536"),
        ("p\x07,1,1,1,1000,,LS,Running,0,5,0\n", "name", "expected text without control characters"),
    ]
    for line, column, rule in cases:
        path = tmp_path / "pods.csv"
        path.write_text(header + "ok,1,1,1,1000,,LS,Running,0,5,0\n" + line)
        with pytest.raises(ImportFormatError) as info:
            load_openb_trace(path)
        assert str(info.value).startswith(f"pods.csv line 3, column {column}: {rule}"), str(info.value)


def test_openb_node_missing_columns(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,gpu\nn1,2\n")
    with pytest.raises(ImportFormatError) as info:
        load_openb_cluster(path)
    assert "cpu_milli, memory_mib, model" in str(info.value) and info.value.line == 1


def test_registry_unknown_names():
    with pytest.raises(ValueError, match="unknown cluster"):
        load_cluster("nope")
    with pytest.raises(ValueError, match="unknown trace"):
        load_trace("nope")


def test_importers_are_pure_parsers():
    """No Django (or Celery) import anywhere in the format modules: they are plain parsers."""
    import ast
    from pathlib import Path

    import clusterspec.importers as package

    for path in Path(package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("django", "celery", "rest_framework") for n in names), path.name


@pytest.mark.parametrize("cells, column, rule", [
    # new-user trial 13, F6: a duration of 1e300 was replayed (300-digit spans and GPU-hours in the report)
    ("2017-10-01 00:00:00,1e300,1,1e300,vc1", "duration", "expected a number <= 31,622,400 seconds (366 days), got '1e300'"),
    ("2017-10-01 00:00:00,31622401,1,31622401,vc1", "duration", "expected a number <= 31,622,400 seconds"),
    ("2017-10-01 00:00:00,100,1,999999,vc1", "gpu_time", "expected duration x num_gpus = 100, got 999999"),
    ("2017-10-01 00:00:00,100,4,100,vc1", "gpu_time", "expected duration x num_gpus = 400, got 100"),
    ("2017-10-01 00:00:00,100,99999999,9999999900,vc1", "num_gpus", "expected an integer <= 65,536"),
    ("2017-10-01 00:00:00,100,1,100,v\x00c1", "cluster", "expected text without control characters, got 'v\\x00c1'"),
    ("2017-10-01 00:00:00,100,1,100,v\x1b[31mc1", "cluster", "expected text without control characters"),
    ("2017-10-01 00:00:00,100,1,100," + "v" * 257, "cluster", "expected at most 256 characters, got 257"),
])
def test_philly_rows_hold_sane_bounds(tmp_path, cells, column, rule):
    path = tmp_path / "jobs.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,66.0,2,132.0,vc1\n" + cells + "\n")
    with pytest.raises(ImportFormatError) as info:
        load_philly_trace(path)
    assert str(info.value).startswith(f"jobs.csv line 3, column {column}: {rule}"), str(info.value)
    # the bound itself and a gpu_time within rounding are taken
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,31622400,2,63244800.4,vc1\n")
    assert load_philly_trace(path).jobs[0].duration == 31622400


def test_the_shipped_traces_hold_the_bounds():
    """Every row of the shipped Philly and openb lists is within them (82,247 and 8,152 rows)."""
    assert len(load_philly_trace(JOBS).jobs) == 82_247
    assert len(load_openb_trace(PODS).jobs) > 7000
