"""GPU telemetry of one node (DESIGN section 14, docs/telemetry.md): sampled every TELEMETRY_SECONDS through
NVML, or read from a dcgm-exporter on the node, buffered, and sent in compact batches. Standard library only.

NVML calls (nvidia-ml-py, https://docs.nvidia.com/deploy/nvml-api/), one sample per GPU:

    sm        nvmlDeviceGetUtilizationRates(h).gpu               percent of time a kernel ran (0-100)
    fb_used   nvmlDeviceGetMemoryInfo(h).used                    MiB
    fb_free   nvmlDeviceGetMemoryInfo(h).free                    MiB
    power     nvmlDeviceGetPowerUsage(h)                         milliwatts -> W
    temp      nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)  degrees C
    throttle  nvmlDeviceGetCurrentClocksThrottleReasons(h)       bitmask (nvmlClocksThrottleReason*)
    ecc_dbe   nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE)  count since the driver loaded
    nvlink_down  links whose nvmlDeviceGetNvLinkState(h, link) is 0 (inactive), of the links that answer
    XIDs      nvmlEventSetCreate + nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, set), then
              nvmlEventSetWait(set, 0) until it times out: one (time, gpu, xid) per event (the GPU by
              nvmlDeviceGetIndex(event.device))

A call the driver does not support (any NVMLError) leaves its field None: never an error, never a zero.
When the driver goes away mid-run (nvmlDeviceGetCount fails), `sample()` returns no rows and the sampler
initialises NVML again at the next call (as when the GPU count changes). Every call about one GPU is guarded: a
GPU that answers nothing (fallen off the bus: NVML_ERROR_GPU_IS_LOST), or whose handle NVML does not give (asked
again at each sample), gets no row; the others are sampled as ever.

Wire format (POST /api/v1/nodes/{name}/telemetry/, one call per heartbeat interval):

    {"interval": 10, "fields": ["t", "gpu", "sm", "fb_used", "fb_free", "power", "temp", "throttle",
                                "ecc_dbe", "nvlink_down"],
     "rows": [[1764556800.0, 0, 87, 40960, 102400, 612.5, 61, 0, 0, 0], ...],
     "xids": [[1764556805.2, 3, 79], ...]}

t: Unix seconds (the node's clock; the server shifts it by the node's measured clock offset), gpu: index.
The buffer keeps at most `max_rows` rows (oldest dropped first, counted in `dropped`), a call carries at
most `batch_rows`.
"""
from __future__ import annotations

import json
import logging
import re
import time
import urllib.request
from collections import deque
from typing import Callable

__all__ = ["FIELDS", "NvmlSampler", "DcgmExporterSampler", "TelemetryBuffer", "parse_prometheus_text"]

log = logging.getLogger("gpuplatform.agent")

FIELDS = ("t", "gpu", "sm", "fb_used", "fb_free", "power", "temp", "throttle", "ecc_dbe", "nvlink_down")
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
MIB = 2**20


def _round(v, nd=1):
    return None if v is None else round(float(v), nd)


class NvmlSampler:
    """Samples every GPU through the nvidia-ml-py module `nvml` (or a fake with the same functions).
    `clock`: () -> Unix seconds. `sample()` -> (rows, xids) in the wire format above."""

    def __init__(self, nvml, *, clock: Callable[[], float] = time.time):
        self.nvml, self.clock = nvml, clock
        self.error = getattr(nvml, "NVMLError", Exception)
        self.ready = False
        self.handles: list = []
        self.event_set = None
        self.nvlinks: dict[int, int] = {}  # gpu index -> links that answer (probed once)

    def _opt(self, fn_name: str, *args):
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.error:
            return None

    def _init(self) -> bool:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except self.error as exc:
            log.warning("telemetry: NVML not available: %s", exc)
            self.ready = False
            return False
        # one handle per index, each guarded: a GPU NVML cannot give one for (lost) is None, asked again at each
        # sample; the others are sampled as ever
        self.handles = [None] * count
        self.nvlinks = {}
        self.event_set = self._opt("nvmlEventSetCreate")
        for i in range(count):
            self._handle(i)
        self.ready = True
        return True

    def _handle(self, i: int):
        """GPU i's handle, got (with its XID events registered and its NVLinks probed) the first time NVML gives
        it; None while it does not."""
        if self.handles[i] is not None:
            return self.handles[i]
        h = self._opt("nvmlDeviceGetHandleByIndex", i)
        if h is None:
            return None
        self.handles[i] = h
        if self.event_set is not None:
            self._opt("nvmlDeviceRegisterEvents", h, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self.event_set)
        n = 0
        for link in range(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            if self._opt("nvmlDeviceGetNvLinkState", h, link) is None:
                break
            n += 1
        self.nvlinks[i] = n
        return h

    def close(self) -> None:
        if self.event_set is not None:
            self._opt("nvmlEventSetFree", self.event_set)
            self.event_set = None
        if self.ready:
            self._opt("nvmlShutdown")
        self.ready = False

    def sample(self) -> tuple[list[list], list[list]]:
        """One row per GPU that answered, and the XID events since the last call."""
        if not self.ready and not self._init():
            return [], []
        try:
            count = self.nvml.nvmlDeviceGetCount()  # the driver is still there
        except self.error as exc:
            log.warning("telemetry: NVML went away (%s); will initialise again", exc)
            self.close()
            return [], []
        if count != len(self.handles):  # NVML numbers its GPUs anew: the handles would name the wrong indexes
            log.warning("telemetry: NVML sees %d GPU(s), was %d; initialising again", count, len(self.handles))
            self.close()
            if not self._init():
                return [], []
        t = round(self.clock(), 3)
        rows = []
        for i in range(len(self.handles)):
            h = self._handle(i)
            if h is None:
                continue  # NVML gives no handle for it (lost): no row
            util = self._opt("nvmlDeviceGetUtilizationRates", h)
            mem = self._opt("nvmlDeviceGetMemoryInfo", h)
            power = self._opt("nvmlDeviceGetPowerUsage", h)
            temp = self._opt("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU)
            throttle = self._opt("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            ecc = self._opt("nvmlDeviceGetTotalEccErrors", h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
            down = None
            if self.nvlinks.get(i):
                states = [self._opt("nvmlDeviceGetNvLinkState", h, link) for link in range(self.nvlinks[i])]
                answered = [s for s in states if s is not None]
                down = sum(1 for s in answered if s == 0) if answered else None
            values = [None if util is None else int(util.gpu),
                      None if mem is None or getattr(mem, "used", None) is None else int(mem.used) // MIB,
                      None if mem is None or getattr(mem, "free", None) is None else int(mem.free) // MIB,
                      None if power is None else _round(power / 1000.0),
                      None if temp is None else int(temp),
                      None if throttle is None else int(throttle),
                      None if ecc is None else int(ecc), down]
            if all(v is None for v in values):
                continue  # this GPU answered nothing (lost): no row, never a row of zeros
            rows.append([t, i, *values])
        return rows, self._xids(t)

    def _xids(self, t: float) -> list[list]:
        out = []
        if self.event_set is None:
            return out
        index = {id(h): i for i, h in enumerate(self.handles) if h is not None}
        for _ in range(64):  # bounded: at most 64 events per sample
            try:
                ev = self.nvml.nvmlEventSetWait(self.event_set, 0)
            except self.error:  # NVML_ERROR_TIMEOUT: no more events (or not supported)
                break
            gpu = self._opt("nvmlDeviceGetIndex", ev.device)
            if gpu is None:
                gpu = index.get(id(ev.device))
            if gpu is not None:
                out.append([t, gpu, int(ev.eventData)])
        return out


_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus_text(text: str) -> list[tuple[str, dict, float]]:
    """Prometheus text exposition -> [(name, labels, value)]; comments and malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(3) or "")), value))
    return out


DCGM_FIELDS = {"DCGM_FI_DEV_GPU_UTIL": "sm", "DCGM_FI_DEV_FB_USED": "fb_used", "DCGM_FI_DEV_FB_FREE": "fb_free",
               "DCGM_FI_DEV_POWER_USAGE": "power", "DCGM_FI_DEV_GPU_TEMP": "temp",
               "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe"}


class DcgmExporterSampler:
    """Reads a dcgm-exporter's /metrics (`url`) instead of NVML: an equal source. `fetch`: url -> text
    (default: urllib, 5 s timeout). DCGM_FI_DEV_XID_ERRORS is the last XID seen: a change is an event.
    An unreachable exporter gives no rows (logged), never zeros."""

    def __init__(self, url: str, *, fetch: Callable[[str], str] | None = None, clock: Callable[[], float] = time.time):
        self.url, self.clock = url, clock
        self.fetch = fetch or (lambda u: urllib.request.urlopen(u, timeout=5).read().decode("utf-8", "replace"))
        self.last_xid: dict[int, int] = {}

    def sample(self) -> tuple[list[list], list[list]]:
        try:
            text = self.fetch(self.url)
        except Exception as exc:  # network, HTTP: no telemetry this round
            log.warning("telemetry: dcgm-exporter %s unreachable: %s", self.url, exc)
            return [], []
        t = round(self.clock(), 3)
        per_gpu: dict[int, dict] = {}
        xids = []
        for name, labels, value in parse_prometheus_text(text):
            try:
                gpu = int(labels.get("gpu", ""))
            except ValueError:
                continue
            if name == "DCGM_FI_DEV_XID_ERRORS":
                xid = int(value)
                if xid and self.last_xid.get(gpu) != xid:
                    xids.append([t, gpu, xid])
                self.last_xid[gpu] = xid
            elif name in DCGM_FIELDS:
                per_gpu.setdefault(gpu, {})[DCGM_FIELDS[name]] = value
        rows = []
        for gpu in sorted(per_gpu):
            v = per_gpu[gpu]
            rows.append([t, gpu, *[None if v.get(f) is None else
                                   (_round(v[f]) if f == "power" else int(v[f])) for f in FIELDS[2:-1]], None])
        return rows, xids


class TelemetryBuffer:
    """Rows and XIDs waiting to be sent: at most `max_rows` rows (oldest dropped first) and 1,000 XIDs.
    `batch()` -> the body of one telemetry call (at most `batch_rows` rows) or None when empty; `ack(body)`
    removes what that body carried once the server took it."""

    def __init__(self, interval: float, *, max_rows: int = 8 * 360, batch_rows: int = 8 * 36):
        self.interval = interval
        self.rows: deque = deque(maxlen=max_rows)
        self.xids: deque = deque(maxlen=1000)
        self.batch_rows = batch_rows
        self.dropped = 0

    def add(self, rows: list[list], xids: list[list]) -> None:
        overflow = len(self.rows) + len(rows) - (self.rows.maxlen or 0)
        if overflow > 0:
            self.dropped += overflow
        self.rows.extend(rows)
        self.xids.extend(xids)

    def batch(self) -> dict | None:
        if not self.rows and not self.xids:
            return None
        return {"interval": self.interval, "fields": list(FIELDS),
                "rows": [list(r) for r in list(self.rows)[: self.batch_rows]], "xids": [list(x) for x in self.xids]}

    def ack(self, body: dict) -> None:
        for _ in range(min(len(body["rows"]), len(self.rows))):
            self.rows.popleft()
        for _ in range(min(len(body["xids"]), len(self.xids))):
            self.xids.popleft()

    @staticmethod
    def wire_bytes(body: dict) -> int:
        """Bytes of `body` as sent (compact JSON, UTF-8)."""
        return len(json.dumps(body, separators=(",", ":")).encode())
