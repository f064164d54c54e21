"""A fake nvidia-ml-py module built from the recorded NVML dump of a real H200 node
(data/nvidia-h200-node/nvml.json). Fields recorded as {"error": ...} raise NVMLError, as the driver did.

Telemetry (agent/telemetry.py): utilization, memory used / free, power, temperature, throttle reasons and
volatile ECC come from the dump (power_usage_mw, memory_used_bytes, throttle_reasons when recorded; else a
value derived from the recorded ones) and can be set per GPU with `set(gpu, **fields)`; `unsupported` names
the NVML functions that raise NVMLError_NotSupported; `xid(gpu, code)` queues an XID event for the event
set; `lose_driver()` makes every call after it raise NVML_ERROR_DRIVER_NOT_LOADED (the driver went away
mid-run) until `restore_driver()`; `lose_gpu(i)` makes every call about GPU i raise NVML_ERROR_GPU_IS_LOST."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

DUMP = Path(__file__).resolve().parents[2] / "data" / "nvidia-h200-node" / "nvml.json"


class NVMLError(Exception):
    pass


class FakeNVML:
    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, dump: dict | None = None, *, fail_init: bool = False, unsupported: set | None = None):
        self.dump = dump if dump is not None else json.loads(DUMP.read_text())
        self.fail_init = fail_init
        self.calls: list[str] = []
        self.unsupported = set(unsupported or ())
        self.live: dict[int, dict] = {}  # gpu -> telemetry values set by the test
        self.events: list = []  # queued XID events
        self.driver_gone = False
        self.lost_gpus: set = set()

    # -- test controls ------------------------------------------------------------------------------
    def set(self, gpu: int, **fields):
        self.live.setdefault(gpu, {}).update(fields)

    def xid(self, gpu: int, code: int):
        self.events.append(SimpleNamespace(device=gpu, eventType=0x8, eventData=code))

    def lose_driver(self):
        self.driver_gone = True

    def restore_driver(self):
        self.driver_gone = False

    def lose_gpu(self, gpu: int):
        self.lost_gpus.add(gpu)

    def _check(self, name: str, h=None):
        if self.driver_gone:
            raise NVMLError("NVML_ERROR_DRIVER_NOT_LOADED")
        if name in self.unsupported:
            raise NVMLError("NVMLError_NotSupported")
        if h is not None and h in self.lost_gpus:
            raise NVMLError("NVML_ERROR_GPU_IS_LOST")

    def _value(self, h, key, default):
        if key in self.live.get(h, {}):
            return self.live[h][key]
        return self.dump["gpus"][h].get(key, default)

    def _gpu(self, h, key):
        if self.driver_gone:
            raise NVMLError("NVML_ERROR_DRIVER_NOT_LOADED")
        value = self.dump["gpus"][h][key]
        if isinstance(value, dict) and "error" in value:
            raise NVMLError(value["error"])
        return value

    def nvmlInit(self):
        self.calls.append("init")
        if self.fail_init:
            raise NVMLError("NVML_ERROR_DRIVER_NOT_LOADED")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        self._check("nvmlDeviceGetCount")
        return len(self.dump["gpus"])

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex")
        return i

    def nvmlDeviceGetIndex(self, h):
        self._check("nvmlDeviceGetIndex")
        return h

    # -- telemetry ----------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h):
        self._check("nvmlDeviceGetUtilizationRates", h)
        gpu, mem = self._value(h, "utilization", [0, 0])
        return SimpleNamespace(gpu=self._value(h, "sm", gpu), memory=mem)

    def nvmlDeviceGetPowerUsage(self, h):
        self._check("nvmlDeviceGetPowerUsage", h)
        return self._value(h, "power_usage_mw", 75000)

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._check("nvmlDeviceGetTemperature", h)
        return self._value(h, "temperature_c", 30)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return self._value(h, "throttle_reasons", 0)

    def nvmlEventSetCreate(self):
        self._check("nvmlEventSetCreate")
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        self._check("nvmlDeviceRegisterEvents", h)

    def nvmlEventSetWait(self, event_set, timeout_ms):
        self._check("nvmlEventSetWait")
        if not self.events:
            raise NVMLError("NVML_ERROR_TIMEOUT")
        return self.events.pop(0)

    def nvmlEventSetFree(self, event_set):
        pass

    def nvmlDeviceGetName(self, h):
        if isinstance(h, tuple):
            return self._mig(h)["name"]
        return self._gpu(h, "name").encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h):
        if isinstance(h, tuple):
            return self._mig(h)["uuid"]
        return self._gpu(h, "uuid")

    def nvmlDeviceGetMemoryInfo(self, h):
        if isinstance(h, tuple):
            return SimpleNamespace(total=self._mig(h)["memory_total_bytes"], used=0, free=self._mig(h)["memory_total_bytes"])
        self._check("nvmlDeviceGetMemoryInfo", h)
        total = self._gpu(h, "memory_total_bytes")
        used = self._value(h, "memory_used_bytes", 0)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._gpu(h, "pci_bus_id").encode())

    def nvmlDeviceGetNumaNodeId(self, h):
        return self._gpu(h, "numa_node")

    def nvmlDeviceGetMigMode(self, h):
        return self._gpu(h, "mig_mode")

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        self._check("nvmlDeviceGetTotalEccErrors", h)
        if counter_type == 0 and "ecc_volatile_uncorrected" in self.live.get(h, {}):
            return self.live[h]["ecc_volatile_uncorrected"]
        key = "ecc_volatile_uncorrected" if counter_type == 0 else "ecc_aggregate_uncorrected"
        if key not in self.dump["gpus"][h]:
            raise NVMLError("NVMLError_NotSupported")
        return self._gpu(h, key)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return self._gpu(h, "retired_pages_dbe")

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._check("nvmlDeviceGetNvLinkState", h)
        links = {entry["link"]: entry for entry in self.dump["gpus"][h].get("nvlinks", [])}
        entry = links.get(link)
        if entry is None or "error" in entry:
            raise NVMLError((entry or {}).get("error", "NVMLError_InvalidArgument"))
        return entry["state"]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        entry = next(e for e in self.dump["gpus"][h]["nvlinks"] if e["link"] == link)
        return SimpleNamespace(busId=entry["remote_pci_bus_id"])

    # -- MIG (agent/inventory.py _mig_instances): a dump GPU with "mig_devices" has MIG devices, each a handle
    # ("mig", gpu, j); tests/agent/nvml_mig_enabled_handmade.json is such a dump (hand-made, see its "note")
    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        return self.dump["gpus"][h].get("max_mig_devices", 0)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        devices = self.dump["gpus"][h].get("mig_devices", [])
        if j >= len(devices):
            raise NVMLError("NVML_ERROR_NOT_FOUND")
        return ("mig", h, j)

    def _mig(self, mh):
        _, h, j = mh
        return self.dump["gpus"][h]["mig_devices"][j]

    def nvmlDeviceGetGpuInstanceId(self, mh):
        return self._mig(mh)["gpu_instance_id"]

    def nvmlDeviceGetComputeInstanceId(self, mh):
        return self._mig(mh)["compute_instance_id"]

    def nvmlDeviceGetAttributes(self, mh):
        return SimpleNamespace(gpuInstanceSliceCount=self._mig(mh)["gpu_instance_slice_count"])
