"""GPU inventory of one node, read through NVML or from `nvidia-smi -q -x`, and the GPU health rule.

Units: memory in MiB; NUMA node -1/None = unknown. Sources:
- NVML through nvidia-ml-py (module `pynvml`; API: https://docs.nvidia.com/deploy/nvml-api/): nvmlInit,
  nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo (.total,
  bytes), nvmlDeviceGetUUID, nvmlDeviceGetPciInfo (.busId), nvmlDeviceGetNumaNodeId (else sysfs
  /sys/bus/pci/devices/<bus>/numa_node), nvmlDeviceGetMigMode ([current, pending], 1 = enabled),
  MIG instances of a GPU in MIG mode: nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex
  (each MIG device = one GPU instance with its compute instance), and on its handle nvmlDeviceGetUUID
  ("MIG-..."), nvmlDeviceGetName ("NVIDIA H200 MIG 1g.18gb": the profile), nvmlDeviceGetMemoryInfo,
  nvmlDeviceGetGpuInstanceId, nvmlDeviceGetComputeInstanceId, nvmlDeviceGetAttributes (.gpuInstanceSliceCount);
  nvmlDeviceGetTotalEccErrors (uncorrected, volatile and aggregate), nvmlDeviceGetRetiredPages (double-bit
  cause), nvmlDeviceGetNvLinkState / nvmlDeviceGetNvLinkRemotePciInfo per link. A call the driver does
  not support (NVMLError) leaves the field None; a failing nvmlInit raises `InventoryError`.
- `nvidia-smi -q -x` XML (DTD nvsmi_device_v13; example data/nvidia-h200-node/nvidia-smi-q.xml): product_name,
  fb_memory_usage/total, uuid, pci/pci_bus_id, mig_mode/current_mig, ecc_errors/{volatile,aggregate}
  uncorrectable counters, retired_pages/double_bit_retirement/retired_count, remapped_rows/remapped_row_failure.
  It carries no NUMA node: that comes from sysfs when `sysfs_root` is given. Malformed XML raises
  `InventoryError`.

Health rule (`apply_health`): unhealthy when volatile uncorrectable ECC errors > 0, a row-remapping
failure is reported, or a fatal XID was seen (`FATAL_XIDS`, from NVIDIA's XID catalog
https://docs.nvidia.com/deploy/xid-errors/: 48 DBE, 62 micro-controller halt, 64 row-remap failure,
74 NVLink error, 79 fallen off the bus, 95 uncontained ECC, 119/120 GSP errors); the reason names the cause.
"""
from __future__ import annotations

import os
import re
import uuid
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

__all__ = ["GpuInventory", "InventoryError", "read_nvml", "read_nvidia_smi_xml", "apply_health", "FATAL_XIDS",
           "flavor_of", "numa_from_sysfs", "demo_copies"]

FATAL_XIDS = {48: "double-bit ECC error", 62: "internal micro-controller halt", 64: "ECC row-remapping failure",
              74: "NVLink error", 79: "GPU has fallen off the bus", 95: "uncontained ECC error",
              119: "GSP RPC timeout", 120: "GSP error"}


class InventoryError(RuntimeError):
    """The inventory could not be read (NVML absent or failing, bad nvidia-smi XML)."""


@dataclass
class GpuInventory:
    index: int
    model: str
    memory_mib: int
    uuid: str
    pci_bus_id: str
    numa_node: int | None = None
    mig_mode: str | None = None  # "enabled" | "disabled" | None (not supported)
    # MIG instances when mig_mode is "enabled": [{uuid, profile, memory_mib, slices, gpu_instance, compute_instance}]
    mig: list[dict] | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_dbe: int | None = None
    row_remap_failure: bool = False
    nvlink_peers: list[str] = field(default_factory=list)  # remote PCI bus ids of active links
    xids: list[int] = field(default_factory=list)
    health: str = "healthy"
    health_reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def flavor_of(model: str) -> str:
    """GPU flavor used by quotas: 'NVIDIA H200' -> 'H200', 'NVIDIA A100-SXM4-80GB' -> 'A100-SXM4-80GB'."""
    return re.sub(r"^(NVIDIA|Tesla)\s+", "", model.strip()).replace(" ", "-")


def apply_health(gpu: GpuInventory) -> GpuInventory:
    reasons = []
    if gpu.ecc_uncorrected_volatile:
        reasons.append(f"{gpu.ecc_uncorrected_volatile} uncorrectable ECC error(s)")
    if gpu.row_remap_failure:
        reasons.append("row remapping failed")
    for xid in sorted(set(gpu.xids)):
        if xid in FATAL_XIDS:
            reasons.append(f"XID {xid} ({FATAL_XIDS[xid]})")
    gpu.health = "unhealthy" if reasons else "healthy"
    gpu.health_reason = "; ".join(reasons)[:200]
    return gpu


def _sysfs_bus(bus_id: str) -> str:
    """NVML/nvidia-smi '00000000:00:06.0' -> sysfs '0000:00:06.0'."""
    dom, _, rest = bus_id.partition(":")
    return f"{int(dom, 16):04x}:{rest.lower()}" if rest else bus_id.lower()


def numa_from_sysfs(bus_id: str, sysfs_root: str = "/sys") -> int | None:
    try:
        with open(os.path.join(sysfs_root, "bus/pci/devices", _sysfs_bus(bus_id), "numa_node")) as fh:
            value = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml(nvml, *, sysfs_root: str = "/sys", xids: dict[int, list[int]] | None = None) -> list[GpuInventory]:
    """Read every GPU through the nvidia-ml-py module `nvml` (or a fake with the same functions)."""
    error = getattr(nvml, "NVMLError", Exception)

    def opt(fn, *args):
        try:
            return fn(*args)
        except error:
            return None

    try:
        nvml.nvmlInit()
    except error as exc:
        raise InventoryError(f"nvmlInit failed: {exc}") from exc
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            bus = _text(nvml.nvmlDeviceGetPciInfo(h).busId)
            numa = opt(getattr(nvml, "nvmlDeviceGetNumaNodeId", lambda _h: None), h)
            if numa is None or numa < 0:
                numa = numa_from_sysfs(bus, sysfs_root)
            mig = opt(nvml.nvmlDeviceGetMigMode, h)
            unc, vol, agg = 1, 0, 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
            retired = opt(nvml.nvmlDeviceGetRetiredPages, h, 1) if hasattr(nvml, "nvmlDeviceGetRetiredPages") else None
            gpu = GpuInventory(
                index=i, model=_text(nvml.nvmlDeviceGetName(h)),
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(h).total) // 2**20,
                uuid=_text(nvml.nvmlDeviceGetUUID(h)), pci_bus_id=bus, numa_node=numa,
                mig_mode=None if mig is None else ("enabled" if mig[0] == 1 else "disabled"),
                ecc_uncorrected_volatile=opt(nvml.nvmlDeviceGetTotalEccErrors, h, unc, vol),
                ecc_uncorrected_aggregate=opt(nvml.nvmlDeviceGetTotalEccErrors, h, unc, agg),
                retired_pages_dbe=None if retired is None else len(retired),
                nvlink_peers=_nvlink_peers(nvml, h, opt), xids=list((xids or {}).get(i, [])),
                mig=_mig_instances(nvml, h, opt) if mig is not None and mig[0] == 1 else None)
            gpus.append(apply_health(gpu))
        return gpus
    finally:
        try:
            nvml.nvmlShutdown()
        except error:
            pass


MIG_PROFILE_IN_NAME = re.compile(r"(\d+g\.\d+gb(?:\+me)?)")


def _mig_instances(nvml, handle, opt) -> list[dict]:
    """The MIG devices of a GPU in MIG mode (module docstring), in NVML's index order. The profile is read from
    the device name; a name without one gives "<slices>g.<memory GB, rounded>gb". Slots without a device
    (NVML_ERROR_NOT_FOUND) are skipped."""
    out = []
    if not hasattr(nvml, "nvmlDeviceGetMaxMigDeviceCount"):  # bindings older than MIG (R450)
        return out
    for j in range(opt(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mh = opt(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
        if mh is None:
            continue
        memory = int(nvml.nvmlDeviceGetMemoryInfo(mh).total) // 2**20
        attrs = opt(nvml.nvmlDeviceGetAttributes, mh)
        slices = int(getattr(attrs, "gpuInstanceSliceCount", 0) or 0)
        found = MIG_PROFILE_IN_NAME.search(_text(opt(nvml.nvmlDeviceGetName, mh) or ""))
        profile = found.group(1) if found else f"{slices}g.{round(memory / 1024)}gb"
        out.append({"uuid": _text(nvml.nvmlDeviceGetUUID(mh)), "profile": profile, "memory_mib": memory,
                    "slices": slices, "gpu_instance": opt(nvml.nvmlDeviceGetGpuInstanceId, mh),
                    "compute_instance": opt(nvml.nvmlDeviceGetComputeInstanceId, mh)})
    return out


def _nvlink_peers(nvml, handle, opt) -> list[str]:
    peers = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = opt(nvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:  # not supported (no NVLink, or past the last link)
            break
        if state == 1:
            remote = opt(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            if remote is not None:
                peers.append(_text(remote.busId))
    return sorted(set(peers))


def _int(node, path: str) -> int | None:
    el = node.find(path)
    if el is None or el.text is None:
        return None
    m = re.match(r"\s*(\d+)", el.text)
    return int(m.group(1)) if m else None


def read_nvidia_smi_xml(text: str, *, sysfs_root: str | None = None,
                        xids: dict[int, list[int]] | None = None) -> list[GpuInventory]:
    """Parse `nvidia-smi -q -x` output. GPUs are numbered in document order (minor_number if given)."""
    try:
        root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1))
    except ET.ParseError as exc:
        raise InventoryError(f"nvidia-smi XML does not parse: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise InventoryError(f"expected <nvidia_smi_log>, got <{root.tag}>")
    gpus = []
    for pos, g in enumerate(root.findall("gpu")):
        index = _int(g, "minor_number")
        index = pos if index is None else index
        bus = (g.findtext("pci/pci_bus_id") or g.get("id") or "").strip()
        mig = (g.findtext("mig_mode/current_mig") or "").strip().lower()
        unc = [_int(g, f"ecc_errors/volatile/{k}") for k in ("dram_uncorrectable", "sram_uncorrectable_parity",
                                                              "sram_uncorrectable_secded", "sram_uncorrectable",
                                                              "double_bit/total")]
        agg = [_int(g, f"ecc_errors/aggregate/{k}") for k in ("dram_uncorrectable", "sram_uncorrectable_parity",
                                                               "sram_uncorrectable_secded", "sram_uncorrectable",
                                                               "double_bit/total")]
        gpu = GpuInventory(
            index=index, model=(g.findtext("product_name") or "").strip(),
            memory_mib=_int(g, "fb_memory_usage/total") or 0, uuid=(g.findtext("uuid") or "").strip(),
            pci_bus_id=bus, numa_node=numa_from_sysfs(bus, sysfs_root) if sysfs_root else None,
            mig_mode=mig if mig in ("enabled", "disabled") else None,
            ecc_uncorrected_volatile=None if all(v is None for v in unc) else sum(v or 0 for v in unc),
            ecc_uncorrected_aggregate=None if all(v is None for v in agg) else sum(v or 0 for v in agg),
            retired_pages_dbe=_int(g, "retired_pages/double_bit_retirement/retired_count"),
            row_remap_failure=(g.findtext("remapped_rows/remapped_row_failure") or "").strip() == "Yes",
            xids=list((xids or {}).get(index, [])))
        gpus.append(apply_health(gpu))
    return gpus


def demo_copies(gpus: list[GpuInventory], count: int, node_name: str) -> list[GpuInventory]:
    """For a local demo: `count` copies of the first GPU of `gpus`, indexes 0..count-1, each with its own
    UUID derived deterministically from the original UUID, `node_name` and the index ("GPU-" + uuid5), its
    own PCI bus id (bus number + index) and no NVLink peers. These are not real devices: a CUDA program
    given their UUIDs finds no GPU. Raises InventoryError when `gpus` is empty or count < 1."""
    if count < 1:
        raise InventoryError("the number of demo GPU copies must be >= 1")
    if not gpus:
        raise InventoryError("no GPU in the inventory to copy for the demo")
    first = gpus[0]
    dom, _, rest = first.pci_bus_id.partition(":")
    bus, _, devfn = rest.partition(":")
    out = []
    for i in range(count):
        gid = uuid.uuid5(uuid.NAMESPACE_URL, f"gpuplatform-demo-gpu:{first.uuid}:{node_name}:{i}")
        try:
            pci = f"{dom}:{(int(bus, 16) + i) % 256:02X}:{devfn}"
        except ValueError:
            pci = f"{first.pci_bus_id}#{i}"
        copy = GpuInventory(**{**first.to_dict(), "index": i, "uuid": f"GPU-{gid}", "pci_bus_id": pci,
                               "nvlink_peers": [], "xids": list(first.xids)})
        out.append(apply_health(copy))
    return out
