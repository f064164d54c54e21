"""The node agent's execution loop (docs/execution.md): assignments in, processes started and stopped,
reports out. Standard library only; no Django imports.

    GET  {api}/api/v1/nodes/{name}/assignments/  -> {"server_time", "poll_seconds", "stop_grace_seconds",
                                                    "tasks": [{"task", "attempt", "action": "run"|"stop",
                                                               "state", "stop_deadline", "argv", "env", ...}]}
    POST {api}/api/v1/nodes/{name}/reports/      <- {"tasks": [started / exited / lost events],
                                                     "logs": [{"task", "attempt", "offset", "data"}]}

One round (`AgentLoop.sync`): GET the assignments; executor.poll() (ended tasks, SIGKILL deadlines); "stop"
tasks are stopped with their deadline converted to the local monotonic clock
(local_deadline = time.monotonic() + (stop_deadline - server_time)), live local tasks that are not listed
are stopped with stop_grace_seconds, then "run" tasks not started yet are started (only while the server's "state" of
the task is "bound": a task it counts running, or releasing, that this agent has no record of starting is never
started, it is reported lost; new-user trial 21, F4); finally one reports call
carries every unacknowledged event and up to 64 KiB of new output per task (more calls follow at once while
a task has a full chunk pending, at most 8 per round).

The outbox is the executor's state directory: an event stays unreported (and is sent again) until the
server answered it, accepted or not (accepted: false is logged and dropped; a refused "started" also stops the
processes just started, whose end and output are then never reported: executor.refuse); a network error or a 5xx
keeps everything for the next round; a 400/422 answer drops the call's events (they would fail again);
a 404 makes the agent register again. The loop never stops on a network error.

Version skew: a lost report's `cause` (agent_exited) is newer than some servers, whose strict reports refuse it (a
400 naming `tasks[i].cause`: "unknown field", or a cause value they do not know). Such a 400 does not drop the call:
the agent logs once that the server takes no cause, and sends the same events again, and every later lost report,
without it (the server then diagnoses the loss as it did before the field).
"""
from __future__ import annotations

import logging
import math
import socket
import time
import urllib.parse
from datetime import datetime, timezone
from typing import Callable

from .client import (AgentError, get_json, gpu_identity, heartbeat_body, host_resources, needs_registration, post_json,
                     register_body)
from .executor import ExecutorError, ProcessExecutor
from .inventory import GpuInventory
from .validation import ValidationRunner

__all__ = ["AgentLoop", "primary_address", "parse_server_time", "LOG_CHUNK_BYTES"]

NEVER_STARTED = "stopped before it started on this node"
CAUSE = "cause"  # the optional field of a lost report older servers do not take (refused_fields)
TIME = "time"  # the optional field of an end's report (when the task ended, node clock) older servers do not take
# the optional report fields an older server refuses: (field, the loop's flag, what it is, what happens without it)
OPTIONAL_FIELDS = (
    (CAUSE, "send_cause", "a lost report's cause", "lost reports go without it from now on"),
    (TIME, "send_time", "the time of a task's end",
     "ends go without it from now on (the server counts them ended when they arrive)"),
)
# a "run" assignment of a task the server no longer counts as waiting to start (`state` not "bound") that this agent
# has no record of: started here before and the record lost (another work directory, a wiped one), or started by
# another agent. Started now it would run a second copy of the attempt (new-user trial 21, F4).
NOT_STARTED_AGAIN = ("not started: the control plane counts this task {state}, but this agent has no record of "
                     "starting it (its state directory was lost or replaced); a second copy would run")
log = logging.getLogger("gpuplatform.agent")

LOG_CHUNK_BYTES = 65536
MAX_REPORT_ROUNDS = 8


def refused_fields(body) -> set[str]:
    """The field names a 400's body refuses: the last part of each key, flattened ("tasks[0].cause") or nested
    ({"tasks": [{}, {"cause": [...]}]}), as the API answers a bad field (api/exceptions.flatten_errors)."""
    names: set[str] = set()
    if isinstance(body, dict):
        for key, value in body.items():
            names.add(str(key).rsplit(".", 1)[-1].split("[", 1)[0])
            names |= refused_fields(value)
    elif isinstance(body, list):
        for item in body:
            names |= refused_fields(item)
    return names


def primary_address() -> str:
    """This host's primary IPv4 address (the source address of its default route), "127.0.0.1" when there
    is none. Sends no packet (a UDP socket is only connected)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def parse_server_time(value) -> datetime | None:
    """An ISO 8601 time with zone ("Z" allowed) -> aware datetime; None when missing or malformed. A time
    without zone is taken as UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


class AgentLoop:
    """Register, heartbeat every `interval` seconds and execute the node's tasks through `executor`.

    api: base URL; token: API token; node_name: this node's name; read: () -> [GpuInventory] (the inventory,
    re-read for every heartbeat); executor: a ProcessExecutor; address / runtime: sent in the register body
    when not None; interval: seconds between heartbeats; poll: seconds between assignment rounds until the
    server says otherwise (its poll_seconds, clamped to [0.05, 60]); resources: (cpu millicores, memory MiB),
    default host_resources(); sleep: the sleep function; timeout: seconds per HTTP call.

    Counters: `beats` (heartbeats sent), `cycles` (assignment rounds). `registered_gpus`: the gpu_identity of the
    inventory last registered, None until a registration succeeds and again once the server answers 404 (it does not
    know the node: register again); `registered` is whether it is not None."""

    def __init__(self, api: str, token: str, node_name: str, read: Callable[[], list[GpuInventory]],
                 executor: ProcessExecutor, *, address: str | None = None, runtime: str | None = None,
                 interval: float = 30.0, poll: float = 2.0, resources: tuple[int, int] | None = None,
                 sleep: Callable[[float], None] = time.sleep, timeout: float = 10.0,
                 log_chunk_bytes: int = LOG_CHUNK_BYTES, telemetry=None, telemetry_seconds: float = 10.0,
                 validation_timeout: float = 300.0):
        base = api.rstrip("/")
        node = urllib.parse.quote(node_name, safe="")
        self.token, self.node_name, self.read, self.executor = token, node_name, read, executor
        self.address, self.runtime = address, runtime
        self.interval, self.poll_seconds, self.default_poll = float(interval), float(poll), float(poll)
        self.resources = resources if resources is not None else host_resources()
        self.sleep, self.timeout, self.log_chunk_bytes = sleep, timeout, int(log_chunk_bytes)
        # telemetry (agent/telemetry.py): a sampler with .sample() -> (rows, xids), sampled every
        # telemetry_seconds, sent with each heartbeat in its own call
        self.telemetry = telemetry
        self.telemetry_seconds = float(telemetry_seconds)
        self.telemetry_buffer = None
        if telemetry is not None:
            from .telemetry import TelemetryBuffer

            self.telemetry_buffer = TelemetryBuffer(self.telemetry_seconds)
        self.samples = 0  # telemetry samples taken
        self.telemetry_bytes = 0  # bytes of telemetry bodies the server took
        self.stop_grace_seconds = 30.0
        self.urls = {"register": f"{base}/api/v1/nodes/register/",
                     "heartbeat": f"{base}/api/v1/nodes/{node}/heartbeat/",
                     "assignments": f"{base}/api/v1/nodes/{node}/assignments/",
                     "reports": f"{base}/api/v1/nodes/{node}/reports/",
                     "telemetry": f"{base}/api/v1/nodes/{node}/telemetry/",
                     "validation": f"{base}/api/v1/nodes/{node}/validation/"}
        # the repair path's validation check (agent/validation.py): started from a heartbeat's answer
        self.validation = ValidationRunner(validation_timeout)
        self.registered_gpus: tuple | None = None  # gpu_identity of the inventory last registered
        self.beats = 0
        self.cycles = 0
        self._recovered = False
        # (task, attempt) -> why it is reported lost without ever being started here: told to stop before this agent
        # started it (NEVER_STARTED), or listed to run in a state other than bound (NOT_STARTED_AGAIN)
        self.never_started: dict = {}
        self.told_never_started: set = set()  # ... and already reported as such
        self.send_cause = True  # False once the server refused a lost report's `cause` (an older server)
        self.send_time = True  # False once the server refused an end's `time` (an older server: the arrival counts)

    @property
    def registered(self) -> bool:
        """Whether the node is registered (as far as this agent knows): a registration succeeded and no 404 since."""
        return self.registered_gpus is not None

    # ---------------------------------------------------------------------------------------------- calls
    def register(self, gpus: list[GpuInventory] | None = None) -> None:
        """POST the register body (inventory `gpus`, default read now; address, runtime). Raises AgentError or
        InventoryError."""
        cpu, mem = self.resources
        gpus = self.read() if gpus is None else gpus
        post_json(self.urls["register"], self.token,
                  {**register_body(self.node_name, gpus, cpu_milli=cpu, memory_mib=mem, address=self.address,
                                   runtime=self.runtime), "executor": "agent"}, timeout=self.timeout)
        self.registered_gpus = gpu_identity(gpus)
        log.info("registered %s", self.node_name)

    def heartbeat(self) -> None:
        """POST one heartbeat (GPU health); a validating node's answer starts its check command
        (agent/validation.py). A heartbeat names GPUs by NVML index: when the inventory's GPUs are not the ones last
        registered (NVML renumbered them: one fell off the bus, the driver was reloaded), the node registers again
        first, so that the server's rows follow (each UUID to its new index) before any health lands on them.
        Raises AgentError or InventoryError (then no heartbeat is sent)."""
        gpus = self.read()
        if self.registered and needs_registration(self.registered_gpus, gpus):
            self.register(gpus)
        answer = post_json(self.urls["heartbeat"], self.token, heartbeat_body(gpus), timeout=self.timeout)
        self.beats += 1
        if self.validation.offer(answer):
            log.info("validation check started: %s", (answer.get("validation") or {}).get("check_command"))

    def send_validation(self) -> bool:
        """POST a finished validation check's result. Returns False when the call failed (kept for the next
        try); a 400/403/404 answer (the node is not validating any more) drops it."""
        ended = self.validation.result()
        if ended is None:
            return True
        requested, result = ended
        try:
            post_json(self.urls["validation"], self.token, result, timeout=self.timeout)
        except AgentError as exc:
            if exc.status in (400, 403, 404, 422):
                log.warning("validation result refused, dropped: %s", exc)
                self.validation.done(requested)
            else:
                self._call_failed("validation", exc)
            return False
        log.info("validation check %s: %s", "passed" if result["passed"] else "failed", result["detail"][:200])
        self.validation.done(requested)
        return True

    def sample_telemetry(self) -> None:
        """Take one telemetry sample into the buffer (no-op without a sampler; never raises)."""
        if self.telemetry is None:
            return
        try:
            rows, xids = self.telemetry.sample()
        except Exception as exc:  # a sampler bug must not stop the agent
            log.warning("telemetry sample failed: %s", exc)
            return
        self.telemetry_buffer.add(rows, xids)
        self.samples += 1

    def send_telemetry(self) -> bool:
        """POST the buffered telemetry (one bounded batch). Returns False when the call failed (kept for the
        next try; a 400 drops the batch: it would fail again)."""
        if self.telemetry_buffer is None:
            return True
        body = self.telemetry_buffer.batch()
        if body is None:
            return True
        try:
            post_json(self.urls["telemetry"], self.token, body, timeout=self.timeout)
        except AgentError as exc:
            if exc.status in (400, 422):
                log.error("telemetry refused as malformed, dropped: %s", exc)
                self.telemetry_buffer.ack(body)
                return False
            self._call_failed("telemetry", exc)
            return False
        self.telemetry_bytes += self.telemetry_buffer.wire_bytes(body)
        self.telemetry_buffer.ack(body)
        return True

    def _call_failed(self, what: str, exc: Exception) -> None:
        if isinstance(exc, AgentError) and exc.status == 404:
            self.registered_gpus = None  # the control plane does not know this node (any more): register again
        log.warning("agent %s: %s", what, exc)

    # ---------------------------------------------------------------------------------------------- round
    def sync(self) -> dict | None:
        """One assignments round (see the module docstring). Returns the assignments answer, or None when it
        could not be fetched (local polling and reporting still happen). Never raises AgentError."""
        if not self._recovered:
            for ended in self.executor.recover():
                log.info("after restart: task %s-%s ended: %s", ended["task"], ended["attempt"], ended)
            self._recovered = True
        answer = None
        if self.registered:
            try:
                answer = get_json(self.urls["assignments"], self.token, timeout=self.timeout)
            except AgentError as exc:
                self._call_failed("assignments", exc)
        self.executor.poll()
        if answer is not None:
            self.apply(answer)
        self.cycles += 1
        if self.registered:
            self.report()
        return answer

    def apply(self, answer: dict, *, now: float | None = None) -> None:
        """Act on an assignments answer: stops first (listed "stop" tasks, then live local tasks not listed),
        then starts. `now`: the time.monotonic() value the answer's server_time corresponds to (default:
        now). Errors of one task are logged and do not stop the others."""
        now = time.monotonic() if now is None else now
        ex = self.executor
        try:
            self.poll_seconds = min(60.0, max(0.05, float(answer.get("poll_seconds") or self.default_poll)))
        except (TypeError, ValueError):
            self.poll_seconds = self.default_poll
        try:
            self.stop_grace_seconds = max(0.0, float(answer.get("stop_grace_seconds", self.stop_grace_seconds)))
        except (TypeError, ValueError):
            pass
        server_time = parse_server_time(answer.get("server_time"))
        tasks = [t for t in answer.get("tasks") or [] if isinstance(t, dict)]
        listed, runs = set(), []
        for t in tasks:
            try:
                key = ex.key_of(t)
            except ExecutorError as exc:
                log.warning("assignment ignored: %s", exc)
                continue
            listed.add(key)
            if t.get("action") == "stop":
                deadline = parse_server_time(t.get("stop_deadline"))
                if deadline is not None and server_time is not None:
                    local = now + (deadline - server_time).total_seconds()
                else:
                    local = now + self.stop_grace_seconds
                if not ex.known(key) and key not in self.told_never_started:
                    # never started here: say so, the server need not wait the deadline
                    self.never_started.setdefault(key, NEVER_STARTED)
                ex.stop(key, local)
            elif t.get("action", "run") == "run":
                state = t.get("state", "bound")  # a server that sends no state: every run task may start
                if state != "bound" and not ex.known(key):
                    if key not in self.told_never_started and key not in self.never_started:
                        log.error("task %s-%s: %s", *key, NOT_STARTED_AGAIN.format(state=state))
                        self.never_started[key] = NOT_STARTED_AGAIN.format(state=state)
                    continue
                runs.append(t)
        for key in ex.live_keys():
            if key not in listed:
                ex.stop(key, now + self.stop_grace_seconds)
        for t in runs:
            try:
                ex.start(t)
            except (ExecutorError, OSError) as exc:
                log.error("task %s-%s could not be started: %s", t.get("task"), t.get("attempt"), exc)

    def report(self) -> bool:
        """POST the unacknowledged events and new log output (one call, more while a task has a full chunk
        pending). Returns False when a call failed (everything unsent stays for the next round)."""
        ex = self.executor
        for _ in range(MAX_REPORT_ROUNDS):
            events = ex.unreported()
            skipped = sorted(k for k in self.never_started if not ex.known(k))
            events += [{"task": k[0], "attempt": k[1], "event": "lost", "message": self.never_started[k]}
                       for k in skipped]
            logs, chunks, full = [], {}, set()
            # a task's output goes once the server has accepted its start: the output of a start it refuses is not the
            # task's (executor.refuse); it waits for the answer to its "started", then goes in the next call at once
            held = {(e["task"], e["attempt"]) for e in events if e["event"] == "started"}
            for key in ex.pending_logs():
                if key in held:
                    continue
                off, end, text = ex.log_chunk(key, self.log_chunk_bytes)
                if end > off:
                    logs.append({"task": key[0], "attempt": key[1], "offset": off, "data": text})
                    chunks[key] = (off, end)
                    if end - off >= self.log_chunk_bytes - 3:
                        full.add(key)
            # A task's end travels with (or after) its last output: the server diagnoses a failure from the log
            # it holds when the exit arrives (docs/diagnosis.md), so an exit waits while its output has more chunks.
            events = [e for e in events if e["event"] == "started" or (e["task"], e["attempt"]) not in full]
            if not events and not logs:
                return True
            left_out = {f for f, flag, _, _ in OPTIONAL_FIELDS if not getattr(self, flag)}
            if left_out:
                events = [{k: v for k, v in e.items() if k not in left_out} for e in events]
            try:
                answer = post_json(self.urls["reports"], self.token, {"tasks": events, "logs": logs},
                                   timeout=self.timeout)
            except AgentError as exc:
                if self._drop_refused_field(exc, events):
                    continue  # the same events again, without it
                if exc.status in (400, 422):
                    log.error("reports refused as malformed, dropped (%d events, %d log chunks): %s",
                              len(events), len(logs), exc)
                    answer = {}
                else:
                    self._call_failed("reports", exc)
                    return False
            self._apply_report_answer(events, chunks, answer if isinstance(answer, dict) else {})
            if not full and not (held & set(ex.pending_logs())):
                return True
        return True

    def _drop_refused_field(self, exc: AgentError, events: list[dict]) -> bool:
        """True when `exc` is the server refusing an optional field these events carry (OPTIONAL_FIELDS: an older
        server): that field is left out of every report from now on (logged once); False for any other error."""
        if exc.status not in (400, 422):
            return False
        refused = refused_fields(exc.body)
        for field, flag, what, after in OPTIONAL_FIELDS:
            if getattr(self, flag) and field in refused and any(field in e for e in events):
                setattr(self, flag, False)
                log.warning("the control plane does not take %s (an older server: %s); %s", what, exc, after)
                return True
        return False

    def _apply_report_answer(self, events: list[dict], chunks: dict, answer: dict) -> None:
        ex = self.executor
        by_event = {}
        for a in answer.get("tasks") or []:
            if isinstance(a, dict):
                by_event[(a.get("task"), a.get("attempt"), a.get("event"))] = a
        for e in events:
            a = by_event.get((e["task"], e["attempt"], e["event"]))
            key = (e["task"], e["attempt"])
            if a is not None and a.get("accepted") is False:
                log.info("server did not accept %s of task %s-%s: %s", e["event"], e["task"], e["attempt"],
                         a.get("detail", ""))
            ex.mark_reported(key, e["event"])
            if a is not None and a.get("accepted") is False and e["event"] == "started":
                # the processes just started are not the task's (it runs elsewhere, has ended, or its attempt is
                # over): none of them may survive, and their end must not be taken for the task's
                ex.refuse(key, time.monotonic() + self.stop_grace_seconds, a.get("detail", ""))
            if key in self.never_started and e["event"] == "lost":
                del self.never_started[key]
                self.told_never_started.add(key)
        by_log = {}
        for a in answer.get("logs") or []:
            if isinstance(a, dict):
                by_log[(a.get("task"), a.get("attempt"))] = a
        for key, (off, end) in chunks.items():
            a = by_log.get(key)
            nxt = a.get("next_offset") if a else None
            if a is not None and a.get("accepted") is False and isinstance(nxt, int) and nxt != off:
                log.info("server wants the log of task %s-%s from offset %d (sent %d)", *key, nxt, off)
                ex.ack_logs(key, nxt)
            else:
                ex.ack_logs(key, end)

    # ----------------------------------------------------------------------------------------------- loop
    def run(self, *, max_cycles: int | None = None, max_beats: int | None = None,
            should_stop: Callable[[], bool] | None = None) -> int:
        """Loop until `max_cycles` assignment rounds or `max_beats` heartbeats were done or `should_stop()`
        is true (forever when all are None). Registration is retried every round until it succeeds.
        Returns the number of assignment rounds."""
        next_beat = next_sync = next_sample = time.monotonic()
        while True:
            now = time.monotonic()
            if not self.registered:
                try:
                    self.register()
                except Exception as exc:  # AgentError, InventoryError, OSError: keep going
                    self._call_failed("register", exc)
            if self.registered and now >= next_beat:
                try:
                    self.heartbeat()
                except Exception as exc:
                    self._call_failed("heartbeat", exc)
                self.send_telemetry()
                next_beat = now + self.interval
            if self.registered:
                self.send_validation()
            if self.telemetry is not None and now >= next_sample:
                self.sample_telemetry()
                next_sample = now + self.telemetry_seconds
            if now >= next_sync:
                self.sync()
                next_sync = time.monotonic() + self.poll_seconds
            else:
                self.executor.poll()  # SIGKILL deadlines between rounds
            if ((max_cycles is not None and self.cycles >= max_cycles)
                    or (max_beats is not None and self.beats >= max_beats)
                    or (should_stop is not None and should_stop())):
                return self.cycles
            wake = min(next_sync, next_beat if self.registered else next_sync,
                       next_sample if self.telemetry is not None else math.inf,
                       self.executor.next_deadline() or math.inf)
            self.sleep(max(0.0, min(wake - time.monotonic(), self.poll_seconds)))
