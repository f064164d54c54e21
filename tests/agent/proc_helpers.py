"""Helpers for the executor tests: real processes, checked through /proc."""
from __future__ import annotations

import time

from gpuplatform.agent.executor import ProcessExecutor, proc_stat, scan_proc


def gone(pid: int) -> bool:
    """True when `pid` runs no more (no /proc entry, or a zombie waiting for its parent)."""
    st = proc_stat(pid)
    return st is None or st.dead


def live_in_group_or_session(ident: int) -> list[int]:
    """Live processes whose process group or session is `ident`."""
    return [p.pid for p in scan_proc().values() if not p.dead and (p.pgid == ident or p.sid == ident)]


def wait_for(pred, timeout: float = 5.0, what: str = "the condition", step: float = 0.02):
    """Poll `pred` every `step` seconds until it returns a true value (returned); AssertionError naming
    `what` after `timeout` seconds. The one polling helper of the process tests (agent, integration, faults)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_ended(ex: ProcessExecutor, keys, timeout: float = 5.0) -> dict:
    """Poll `ex` until every key in `keys` ended; {key: ended record}."""
    want, got = {tuple(k) for k in keys}, {}
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for rec in ex.poll():
            got[(rec["task"], rec["attempt"])] = rec
        if want <= set(got):
            return got
        time.sleep(0.02)
    raise AssertionError(f"tasks {sorted(want - set(got))} did not end within {timeout} s")


def read_int(path: str, timeout: float = 5.0) -> int:
    def ready():
        try:
            with open(path) as fh:
                text = fh.read().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None
    return wait_for(ready, timeout)


def assignment(task: int, script: str, *, attempt: int = 0, env: dict | None = None, gpus=None, **extra) -> dict:
    """An assignments-answer task running `sh -c script`."""
    return {"task": task, "attempt": attempt, "job": 1, "job_name": "t", "role": "worker", "index": 0,
            "action": "run", "stop_deadline": None, "argv": ["sh", "-c", script], "env": dict(env or {}),
            "working_dir": "", "image": "", "gpus": gpus if gpus is not None else [{"index": 0, "uuid": f"GPU-{task}"}],
            **extra}
