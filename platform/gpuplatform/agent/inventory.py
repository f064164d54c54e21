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
  cause), nvmlDeviceGetNvLinkState / nvmlDeviceGetNvLinkRemotePciInfo per link. Every call about one GPU is
  guarded: one the driver does not support (NVMLError) leaves its field None; a GPU NVML cannot read (fallen off
  the bus: NVML_ERROR_GPU_IS_LOST while the driver is still loaded) is reported unhealthy as last read, or left
  out when it never was identified, and the other GPUs are read as ever (read_nvml, NvmlReader). NVML as a whole
  gone (nvmlInit or nvmlDeviceGetCount failing, NVML_ERROR_DRIVER_NOT_LOADED ...) raises `InventoryError`.
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

import copy
import logging
import os
import re
import uuid
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

__all__ = ["GpuInventory", "InventoryError", "read_nvml", "NvmlReader", "read_nvidia_smi_xml", "apply_health",
           "FATAL_XIDS", "flavor_of", "numa_from_sysfs", "demo_copies"]

FATAL_XIDS = {48: "double-bit ECC error", 62: "internal micro-controller halt", 64: "ECC row-remapping failure",
              74: "NVLink error", 79: "GPU has fallen off the bus", 95: "uncontained ECC error",
              119: "GSP RPC timeout", 120: "GSP error"}


log = logging.getLogger("gpuplatform.agent")


class InventoryError(RuntimeError):
    """The inventory could not be read (NVML absent or failing, bad nvidia-smi XML)."""


@dataclass
class GpuInventory:
    index: int
    model: str
    memory_mib: int | None  # None: NVML could not read it (read_nvml); the platform keeps what it has
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


def apply_health(gpu: GpuInventory, problems: list[str] | tuple = ()) -> GpuInventory:
    """Judge `gpu` by the health rule (module docstring); `problems`: reasons found while reading it (NVML cannot
    read the GPU: read_nvml), first in the reason."""
    reasons = list(problems)
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


# NVML error codes (nvml.h) by what they say about the read. NVML as a whole is gone: the read fails (InventoryError),
# as a failing nvmlInit does. One GPU is gone (fallen off the bus, XID 79; or it needs a reset): that GPU is unhealthy.
NVML_GONE = {1: "uninitialized", 9: "drivernotloaded", 12: "librarynotfound", 18: "librmversionmismatch"}
GPU_LOST = {15: "gpuislost", 16: "resetrequired"}


def _nvml_error_says(exc: Exception, codes: dict[int, str]) -> bool:
    """Whether NVMLError `exc` is one of `codes`: by its `value` (nvidia-ml-py), else by its class name or message
    (NVMLError_GpuIsLost, "NVML_ERROR_GPU_IS_LOST", "GPU is lost"), letters and digits only."""
    value = getattr(exc, "value", None)
    if isinstance(value, int) and not isinstance(value, bool):
        return value in codes
    said = re.sub(r"[^a-z0-9]", "", f"{type(exc).__name__} {exc}".lower())
    return any(word in said for word in codes.values())


def _nvml_error_text(exc: Exception, nvml=None) -> str:
    """The error's words with its nvml.h name when the module knows its code: "GPU is lost (NVML_ERROR_GPU_IS_LOST)"."""
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - nvidia-ml-py asks the library for the words
        text = ""
    text = text or type(exc).__name__
    value = getattr(exc, "value", None)
    if not isinstance(value, int) or isinstance(value, bool):
        return text
    name = next((k for k in dir(nvml) if k.startswith("NVML_ERROR_") and getattr(nvml, k) == value), str(value))
    return text if name in text else f"{text} ({name})"


class _Device:
    """The NVML calls about one GPU, each guarded: a failing call answers None and is kept in `failures`
    ((call, error)); one whose error means NVML as a whole is gone raises InventoryError."""

    def __init__(self, nvml, error, index: int):
        self.nvml, self.error, self.index = nvml, error, index
        self.failures: list[tuple[str, Exception]] = []

    def __call__(self, name: str, *args):
        fn = getattr(self.nvml, name, None)
        if fn is None:  # bindings older than the call: not supported
            return None
        try:
            return fn(*args)
        except self.error as exc:
            if _nvml_error_says(exc, NVML_GONE):
                raise InventoryError(f"NVML went away while reading GPU {self.index}: {name}: {exc}") from exc
            self.failures.append((name, exc))
            return None

    def failed(self, *names: str) -> bool:
        return any(name in names for name, _ in self.failures)

    def lost(self) -> tuple[str, Exception] | None:
        """The first call that said the GPU is lost (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED), if any."""
        return next(((n, e) for n, e in self.failures if _nvml_error_says(e, GPU_LOST)), None)


def _lost_reason(name: str, exc: Exception | None, nvml=None) -> str:
    return f"NVML cannot read this GPU ({name}: {'no answer' if exc is None else _nvml_error_text(exc, nvml)})"


def read_nvml(nvml, *, sysfs_root: str = "/sys", xids: dict[int, list[int]] | None = None,
              known: dict[int, GpuInventory] | None = None, lost: set | None = None) -> list[GpuInventory]:
    """Read every GPU through the nvidia-ml-py module `nvml` (or a fake with the same functions).

    Every call about one GPU is guarded, so one GPU NVML cannot read (fallen off the bus: NVML_ERROR_GPU_IS_LOST
    on its calls while the driver is still loaded) never hides the others:
    - a GPU whose handle or UUID cannot be read is reported as it was last read at its index (`known`, which this
      call keeps up to date: pass the same dict to every read), unhealthy, its health reason naming the NVML error;
      one never read before (no UUID to name it by) is left out of the inventory;
    - a call that says the GPU is lost (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED), whichever it is, makes
      the GPU unhealthy the same way; its topology facts that failed are its last read's;
    - any other failing call leaves its field None (not supported), as always.
    A lost GPU is logged as a warning. `lost`: the GPUs the last read found lost, which this call keeps up to date
    (pass the same set to every read, as NvmlReader does): a GPU is then logged once when it becomes lost and once
    (info) when NVML reads it again or no longer lists it, not at every read (an agent reads at every heartbeat);
    without it every lost GPU is logged at every call.
    NVML as a whole gone raises InventoryError: nvmlInit or nvmlDeviceGetCount failing, or any call answering
    NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH."""
    error = getattr(nvml, "NVMLError", Exception)
    known = {} if known is None else known

    try:
        nvml.nvmlInit()
    except error as exc:
        raise InventoryError(f"nvmlInit failed: {exc}") from exc
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except error as exc:
            raise InventoryError(f"nvmlDeviceGetCount failed: {exc}") from exc
        read = [_read_device(nvml, error, i, sysfs_root, list((xids or {}).get(i, [])), known) for i in range(count)]
        identified = {gpu.uuid for gpu, named, _ in read if gpu is not None and named}
        # one reported as last read at its index, whose UUID this read found at another (NVML renumbered): not twice
        kept = [(gpu, named, why) for gpu, named, why in read
                if gpu is None or named or gpu.uuid not in identified]
        gpus = [gpu for gpu, _, _ in kept if gpu is not None]
        _log_lost(kept, lost)
        for g in gpus:
            known[g.index] = GpuInventory(**{**g.to_dict(), "xids": [], "health": "healthy", "health_reason": ""})
        return gpus
    finally:
        try:
            nvml.nvmlShutdown()
        except error:
            pass


def _log_lost(read: list[tuple[GpuInventory | None, bool, tuple | None]], lost: set | None) -> None:
    """Log the GPUs `read` (read_nvml: (GPU, identified, (key, why) when NVML cannot read it)) finds lost: each one
    not in `lost` (the last read's) as a warning, each one of `lost` NVML reads again (or no longer lists) as info;
    then `lost` holds this read's. `lost` None: every lost GPU, as a warning."""
    now = {why[0]: why[1] for _, _, why in read if why is not None}
    for key, message in now.items():
        if lost is None or key not in lost:
            log.warning("%s", message)
    if lost is None:
        return
    fine = {}  # the GPUs this read identified and read: by UUID, and by index (for one never identified)
    for gpu, named, why in read:
        if gpu is not None and named and why is None:
            fine[("uuid", gpu.uuid)] = fine[("index", gpu.index)] = gpu
    for key in sorted(lost - now.keys()):
        gpu = fine.get(key)
        if gpu is not None:
            log.info("GPU %d (%s): NVML reads it again", gpu.index, gpu.uuid)
        elif key[0] == "uuid":
            log.info("GPU %s: no longer in NVML's list (reported lost until now)", key[1])
        # (an index never identified whose GPU is now identified but lost: its warning names it by UUID)
    lost.clear()
    lost.update(now)


def _read_device(nvml, error, i: int, sysfs_root: str, xids: list[int],
                 known: dict[int, GpuInventory]) -> tuple[GpuInventory | None, bool, tuple[tuple, str] | None]:
    """(GPU `i` (read_nvml), whether this read identified it by its UUID, (("uuid", its UUID) or ("index", `i`)
    when never identified, the warning to log) when NVML cannot read it, else None); (None, False, ...) when it
    cannot be identified and never was."""
    dev = _Device(nvml, error, i)
    h = dev("nvmlDeviceGetHandleByIndex", i)
    uuid_ = None if h is None else dev("nvmlDeviceGetUUID", h)
    if h is None or uuid_ is None:  # not identified: as last read at this index, unhealthy; else left out
        name, exc = dev.failures[-1] if dev.failures else ("nvmlDeviceGetUUID", None)
        last = known.get(i)
        if last is None:
            return None, False, (("index", i), f"GPU {i}: {_lost_reason(name, exc, nvml)}; never identified: left "
                                                f"out of the inventory")
        return (apply_health(GpuInventory(**{**copy.deepcopy(last.to_dict()), "index": i, "xids": xids}),
                             problems=[_lost_reason(name, exc, nvml)]), False,
                (("uuid", last.uuid), f"GPU {i} ({last.uuid}): {_lost_reason(name, exc, nvml)}: reported unhealthy"))
    uuid_ = _text(uuid_)
    pci = dev("nvmlDeviceGetPciInfo", h)
    bus = "" if pci is None else _text(pci.busId)
    numa = dev("nvmlDeviceGetNumaNodeId", h)
    if (numa is None or numa < 0) and bus:
        numa = numa_from_sysfs(bus, sysfs_root)
    mig = dev("nvmlDeviceGetMigMode", h)
    unc, vol, agg = 1, 0, 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
    retired = dev("nvmlDeviceGetRetiredPages", h, 1)
    name = dev("nvmlDeviceGetName", h)
    memory = dev("nvmlDeviceGetMemoryInfo", h)
    gpu = GpuInventory(
        index=i, model="" if name is None else _text(name),
        memory_mib=None if memory is None else int(memory.total) // 2**20,
        uuid=uuid_, pci_bus_id=bus, numa_node=numa,
        mig_mode=None if mig is None else ("enabled" if mig[0] == 1 else "disabled"),
        ecc_uncorrected_volatile=dev("nvmlDeviceGetTotalEccErrors", h, unc, vol),
        ecc_uncorrected_aggregate=dev("nvmlDeviceGetTotalEccErrors", h, unc, agg),
        retired_pages_dbe=None if retired is None else len(retired),
        nvlink_peers=_nvlink_peers(nvml, h, dev), xids=xids,
        mig=_mig_instances(nvml, h, dev) if mig is not None and mig[0] == 1 else None)
    lost = dev.lost()
    if lost is None:
        return apply_health(gpu), True, None
    # lost under this read: what failed of its identity and topology is as last read (the same UUID)
    last = next((g for g in known.values() if g.uuid == uuid_), None)
    if last is not None:
        failed = {"model": dev.failed("nvmlDeviceGetName"), "memory_mib": dev.failed("nvmlDeviceGetMemoryInfo"),
                  "pci_bus_id": dev.failed("nvmlDeviceGetPciInfo"),
                  "numa_node": dev.failed("nvmlDeviceGetNumaNodeId", "nvmlDeviceGetPciInfo"),
                  "mig_mode": dev.failed("nvmlDeviceGetMigMode"),
                  "nvlink_peers": dev.failed("nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo")}
        for key, was in failed.items():
            if was:
                setattr(gpu, key, copy.deepcopy(getattr(last, key)))
        if gpu.mig_mode == "enabled" == last.mig_mode and (gpu.mig is None or dev.failed(*MIG_CALLS)):
            gpu.mig = copy.deepcopy(last.mig)  # its MIG layout as last read: not a layout changed under a job
    return (apply_health(gpu, problems=[_lost_reason(*lost, nvml)]), True,
            (("uuid", uuid_), f"GPU {i} ({uuid_}): {_lost_reason(*lost, nvml)}: reported unhealthy"))


class NvmlReader:
    """A no-argument inventory reader through NVML (`nvml`: the nvidia-ml-py module or a fake) that keeps each
    index's last read GPU (`known`), so that a GPU NVML cannot identify any more is still reported, unhealthy, at its
    index (read_nvml) for as long as the agent runs, and the GPUs it found lost (`lost`), so that a lost GPU is
    logged when it becomes lost and when NVML reads it again, not at every read (every heartbeat). Raises
    InventoryError as read_nvml."""

    def __init__(self, nvml, *, sysfs_root: str = "/sys"):
        self.nvml, self.sysfs_root = nvml, sysfs_root
        self.known: dict[int, GpuInventory] = {}
        self.lost: set = set()

    def __call__(self, xids: dict[int, list[int]] | None = None) -> list[GpuInventory]:
        return read_nvml(self.nvml, sysfs_root=self.sysfs_root, xids=xids, known=self.known, lost=self.lost)


MIG_PROFILE_IN_NAME = re.compile(r"(\d+g\.\d+gb(?:\+me)?)")
MIG_CALLS = ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetMemoryInfo",
             "nvmlDeviceGetAttributes", "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetGpuInstanceId",
             "nvmlDeviceGetComputeInstanceId")


def _mig_instances(nvml, handle, dev) -> list[dict]:
    """The MIG devices of a GPU in MIG mode (module docstring), in NVML's index order. The profile is read from
    the device name; a name without one gives "<slices>g.<memory GB, rounded>gb". Slots without a device
    (NVML_ERROR_NOT_FOUND) are skipped, as is a device whose UUID or memory cannot be read (every call is `dev`'s,
    guarded: read_nvml)."""
    out = []
    if not hasattr(nvml, "nvmlDeviceGetMaxMigDeviceCount"):  # bindings older than MIG (R450)
        return out
    for j in range(dev("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
        mh = dev("nvmlDeviceGetMigDeviceHandleByIndex", handle, j)
        if mh is None:
            continue
        info, mig_uuid = dev("nvmlDeviceGetMemoryInfo", mh), dev("nvmlDeviceGetUUID", mh)
        if info is None or mig_uuid is None:
            continue
        memory = int(info.total) // 2**20
        attrs = dev("nvmlDeviceGetAttributes", mh)
        slices = int(getattr(attrs, "gpuInstanceSliceCount", 0) or 0)
        found = MIG_PROFILE_IN_NAME.search(_text(dev("nvmlDeviceGetName", mh) or ""))
        profile = found.group(1) if found else f"{slices}g.{round(memory / 1024)}gb"
        out.append({"uuid": _text(mig_uuid), "profile": profile, "memory_mib": memory,
                    "slices": slices, "gpu_instance": dev("nvmlDeviceGetGpuInstanceId", mh),
                    "compute_instance": dev("nvmlDeviceGetComputeInstanceId", mh)})
    return out


def _nvlink_peers(nvml, handle, dev) -> list[str]:
    peers = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = dev("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:  # not supported (no NVLink, or past the last link)
            break
        if state == 1:
            remote = dev("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
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
