"""A fake nvidia-ml-py module built from the recorded NVML dump of a real H200 node
(data/nvidia-h200-node/nvml.json). Fields recorded as {"error": ...} raise NVMLError, as the driver did."""
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

    def __init__(self, dump: dict | None = None, *, fail_init: bool = False):
        self.dump = dump if dump is not None else json.loads(DUMP.read_text())
        self.fail_init = fail_init
        self.calls: list[str] = []

    def _gpu(self, h, key):
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
        return len(self.dump["gpus"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self._gpu(h, "name").encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h, "uuid")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self._gpu(h, "memory_total_bytes"))

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._gpu(h, "pci_bus_id").encode())

    def nvmlDeviceGetNumaNodeId(self, h):
        return self._gpu(h, "numa_node")

    def nvmlDeviceGetMigMode(self, h):
        return self._gpu(h, "mig_mode")

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        key = "ecc_volatile_uncorrected" if counter_type == 0 else "ecc_aggregate_uncorrected"
        if key not in self.dump["gpus"][h]:
            raise NVMLError("NVMLError_NotSupported")
        return self._gpu(h, key)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return self._gpu(h, "retired_pages_dbe")

    def nvmlDeviceGetNvLinkState(self, h, link):
        links = {entry["link"]: entry for entry in self.dump["gpus"][h].get("nvlinks", [])}
        entry = links.get(link)
        if entry is None or "error" in entry:
            raise NVMLError((entry or {}).get("error", "NVMLError_InvalidArgument"))
        return entry["state"]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        entry = next(e for e in self.dump["gpus"][h]["nvlinks"] if e["link"] == link)
        return SimpleNamespace(busId=entry["remote_pci_bus_id"])
