"""Inventory readers on the recorded H200 node (NVML dump through a fake NVML, nvidia-smi -q -x) and
the health rule."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpuplatform.agent.inventory import (
    GpuInventory, InventoryError, apply_health, flavor_of, numa_from_sysfs, read_nvidia_smi_xml, read_nvml,
)
from tests.agent.fake_nvml import FakeNVML

NODE = Path(__file__).resolve().parents[2] / "data" / "nvidia-h200-node"
XML = (NODE / "nvidia-smi-q.xml").read_text()


def sysfs(tmp_path, bus="0000:00:06.0", numa="0"):
    d = tmp_path / "bus" / "pci" / "devices" / bus
    d.mkdir(parents=True)
    (d / "numa_node").write_text(numa + "\n")
    return str(tmp_path)


def test_nvml_reads_the_h200_dump(tmp_path):
    nvml = FakeNVML()
    [gpu] = read_nvml(nvml, sysfs_root=sysfs(tmp_path))
    assert (gpu.model, gpu.memory_mib, gpu.pci_bus_id) == ("NVIDIA H200", 143771, "00000000:00:06.0")
    assert gpu.uuid == "GPU-00000000-1111-2222-3333-444444444444"
    assert gpu.numa_node == 0  # NVML said NotSupported: sysfs gives it
    assert gpu.mig_mode == "disabled" and gpu.ecc_uncorrected_volatile == 0
    assert gpu.ecc_uncorrected_aggregate is None and gpu.retired_pages_dbe is None  # not supported there
    assert gpu.nvlink_peers == [] and gpu.health == "healthy"
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_and_nvidia_smi_agree(tmp_path):
    root = sysfs(tmp_path)
    [a] = read_nvml(FakeNVML(), sysfs_root=root)
    [b] = read_nvidia_smi_xml(XML, sysfs_root=root)
    for key in ("index", "model", "memory_mib", "uuid", "pci_bus_id", "numa_node", "mig_mode",
                "ecc_uncorrected_volatile", "health"):
        assert getattr(a, key) == getattr(b, key), key
    assert b.ecc_uncorrected_aggregate == 0 and b.row_remap_failure is False


def test_nvml_nvlink_peers_and_sick_gpu():
    dump = FakeNVML().dump
    sick = copy.deepcopy(dump)
    g = sick["gpus"][0]
    g["ecc_volatile_uncorrected"] = 3
    g["numa_node"] = 1
    g["mig_mode"] = [1, 1]
    g["nvlinks"] = [{"link": 0, "state": 1, "remote_pci_bus_id": "00000000:00:07.0"},
                    {"link": 1, "state": 0}, {"link": 2, "state": 1, "remote_pci_bus_id": "00000000:00:08.0"}]
    [gpu] = read_nvml(FakeNVML(sick), sysfs_root="/nonexistent", xids={0: [79, 13]})
    assert gpu.numa_node == 1 and gpu.mig_mode == "enabled"
    assert gpu.nvlink_peers == ["00000000:00:07.0", "00000000:00:08.0"]
    assert gpu.health == "unhealthy"
    assert gpu.health_reason == "3 uncorrectable ECC error(s); XID 79 (GPU has fallen off the bus)"


def test_nvml_absent_raises():
    with pytest.raises(InventoryError, match="nvmlInit failed"):
        read_nvml(FakeNVML(fail_init=True))


def test_xml_ecc_and_row_remap_failure_make_unhealthy():
    text = XML.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    [gpu] = read_nvidia_smi_xml(text)
    assert gpu.ecc_uncorrected_volatile == 2 and gpu.health == "unhealthy"
    text = XML.replace("<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>Yes</remapped_row_failure>")
    [gpu] = read_nvidia_smi_xml(text)
    assert gpu.health_reason == "row remapping failed"
    [gpu] = read_nvidia_smi_xml(XML)
    assert gpu.numa_node is None and gpu.index == 0  # no sysfs root: unknown


def test_xml_refuses_garbage():
    with pytest.raises(InventoryError):
        read_nvidia_smi_xml("<nvidia_smi_log><gpu>")
    with pytest.raises(InventoryError, match="expected <nvidia_smi_log>"):
        read_nvidia_smi_xml("<other/>")


def test_health_rule_ignores_non_fatal_xids_and_helpers(tmp_path):
    gpu = apply_health(GpuInventory(0, "NVIDIA H100 80GB HBM3", 81559, "u", "b", xids=[13, 31]))
    assert gpu.health == "healthy"
    assert flavor_of("NVIDIA H200") == "H200" and flavor_of("NVIDIA H100 80GB HBM3") == "H100-80GB-HBM3"
    assert numa_from_sysfs("00000000:00:06.0", sysfs(tmp_path, numa="-1")) is None


def test_nvml_reads_mig_instances_of_an_enabled_layout(tmp_path):
    """tests/agent/nvml_mig_enabled_handmade.json: HAND-MADE (the recorded H200 dump has MIG disabled) from the
    recorded dump with MIG enabled on GPU 0 and four MIG devices sized from its recorded mig_profiles table."""
    import json
    from pathlib import Path

    dump = json.loads((Path(__file__).parent / "nvml_mig_enabled_handmade.json").read_text())
    [gpu] = read_nvml(FakeNVML(dump), sysfs_root=sysfs(tmp_path))
    assert gpu.mig_mode == "enabled"
    assert [(m["profile"], m["memory_mib"], m["slices"]) for m in gpu.mig] == [
        ("3g.71gb", 71424, 3), ("2g.35gb", 33280, 2), ("1g.18gb", 16384, 1), ("1g.18gb", 16384, 1)]
    assert len({m["uuid"] for m in gpu.mig}) == 4 and all(m["uuid"].startswith("MIG-") for m in gpu.mig)
    assert sum(m["slices"] for m in gpu.mig) == 7
    # the recorded dump (MIG disabled) reports no instances
    [plain] = read_nvml(FakeNVML(), sysfs_root=str(tmp_path))
    assert plain.mig is None
