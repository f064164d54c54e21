"""services.apply_topology / plan_topology and the import_topology / export_topology commands."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from clusterspec.importers.topology import parse_hypernode, parse_slurm_conf
from gpuplatform import services
from gpuplatform.models import Domain, Event, Node
from gpuplatform.services import ValidationError

DATA = Path(__file__).resolve().parents[2] / "data" / "topology"
VOLCANO = DATA / "volcano" / "hypernodes_tree_s0-s6.yaml"


@pytest.fixture
def eight_nodes(db):
    for i in range(8):
        Node.objects.create(name=f"node-{i}", flavor="H100", gpu_count=8)


def tree():
    return {d.name: (d.tier, d.parent.name if d.parent_id else None) for d in Domain.objects.select_related("parent")}


def test_apply_creates_tree_and_attaches_nodes(eight_nodes):
    spec = parse_hypernode(VOLCANO.read_text())
    plan = services.apply_topology(spec)
    assert len(plan.create) == 7 and len(plan.reattach) == 8
    assert tree()["s0"] == (1, "s4") and tree()["s6"] == (3, None)
    assert Node.objects.get(name="node-5").domain.name == "s2"
    assert Event.objects.filter(kind="topology_applied").count() == 1
    assert services.plan_topology(spec).empty  # idempotent
    assert services.topology_from_db().canonical() == spec.canonical()


def test_apply_moves_and_deletes(eight_nodes):
    services.apply_topology(parse_hypernode(VOLCANO.read_text()))
    conf = "SwitchName=s0 Nodes=node-[0-3]\nSwitchName=s1 Nodes=node-[4-7]\nSwitchName=top Switches=s[0-1]\n"
    spec = parse_slurm_conf(conf)
    plan = services.plan_topology(spec)
    assert ("s0", "s4", "top") in plan.move and ("s0", 1, 2) in plan.retier
    assert ("node-2", "s1", "s0") in plan.reattach and set(plan.delete) == {"s2", "s3", "s4", "s5", "s6"}
    services.apply_topology(spec, delete_missing=True)
    assert tree() == {"top": (3, None), "s0": (2, "top"), "s1": (2, "top")}
    assert Node.objects.filter(domain__name="s1").count() == 4


def test_apply_refuses_unknown_nodes_and_writes_nothing(db):
    Node.objects.create(name="node-0", flavor="H100", gpu_count=8)
    with pytest.raises(ValidationError, match="not in the database"):
        services.apply_topology(parse_hypernode(VOLCANO.read_text()))
    assert not Domain.objects.exists() and not Event.objects.exists()
    services.apply_topology(parse_hypernode(VOLCANO.read_text()), skip_unknown_nodes=True)
    assert Domain.objects.count() == 7 and Node.objects.get().domain.name == "s0"


def test_import_command_dry_run_shows_tree_and_diff(eight_nodes):
    out = io.StringIO()
    call_command("import_topology", str(VOLCANO), "--format", "hypernode", "--dry-run", stdout=out)
    text = out.getvalue()
    assert "s6 (tier 3, 8 nodes)\n  s4 (tier 2, 4 nodes)\n    s0 (tier 1, 2 nodes)" in text
    assert "create domain s4 (tier 2, parent s6)" in text and "re-attach node node-0: - -> s0" in text
    assert not Domain.objects.exists()
    call_command("import_topology", str(VOLCANO), "--format", "hypernode", stdout=io.StringIO())
    assert Domain.objects.count() == 7


def test_import_command_refuses_bad_file_with_line(tmp_path, eight_nodes):
    bad = tmp_path / "bad.conf"
    bad.write_text("SwitchName=a Nodes=node-[0-3]\nSwitchName=b Nodes=node-[3-7]\n")
    with pytest.raises(CommandError, match="bad.conf line 2: node 'node-3' is in two domains"):
        call_command("import_topology", str(bad), "--format", "slurm-conf", stdout=io.StringIO())
    unknown = tmp_path / "unknown.conf"
    unknown.write_text("SwitchName=a Nodes=node-[0-9]\n")
    with pytest.raises(CommandError, match="line 1: unknown node 'node-8'"):
        call_command("import_topology", str(unknown), "--format", "slurm-conf", "--nodes-from-db", stdout=io.StringIO())
    assert not Domain.objects.exists()


def test_export_command_round_trips_through_import(tmp_path, eight_nodes):
    call_command("import_topology", str(VOLCANO), "--format", "hypernode", stdout=io.StringIO())
    before = services.topology_from_db().canonical()
    for fmt in ("hypernode", "slurm-conf"):
        out = tmp_path / f"export.{fmt}"
        call_command("export_topology", "--format", fmt, "--output", str(out), stdout=io.StringIO())
        Node.objects.update(domain=None)
        Domain.objects.update(parent=None)
        Domain.objects.all().delete()
        call_command("import_topology", str(out), "--format", fmt, "--nodes-from-db", stdout=io.StringIO())
        assert services.topology_from_db().canonical() == before
