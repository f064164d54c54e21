"""The node's validation check (docs/diagnosis.md, the repair path): in_repair -> validating with a
`check_command` (an argv the admin gave, or the NODE_VALIDATION_COMMAND setting) and the agent runs it on the
node. Standard library only; no Django imports.

The heartbeat's answer (the node as the API shows it) carries `state` and `validation` {"requested_at",
"check_command", ...}; while the node is validating with a command and no result for that request was
posted yet, the agent runs the command once (in a thread: the loop keeps heartbeating and running tasks)
and POSTs {api}/api/v1/nodes/{name}/validation/ {"passed", "detail"}: passed = the command exited 0 (and,
when the command prints a line starting "VALIDATION: FAIL", not that: a check may report a failure its
exit status hides); detail = the exit status and the tail of its output. A command that cannot start, or
runs past `timeout` seconds, fails the check (its reason in the detail).
"""
from __future__ import annotations

import subprocess
import threading

__all__ = ["run_check", "ValidationRunner", "DETAIL_TAIL"]

DETAIL_TAIL = 1500  # characters of the command's output kept in the detail
FAIL_MARK = "VALIDATION: FAIL"


def run_check(argv: list[str], *, timeout: float = 300.0) -> dict:
    """Run `argv` (no shell) and judge it: {"passed": bool, "detail": str}. Never raises."""
    if not argv or not all(isinstance(a, str) for a in argv):
        return {"passed": False, "detail": "check_command must be a non-empty list of strings"}
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.output or b"").decode("utf-8", "replace")
        return {"passed": False, "detail": f"check {argv[0]} ran past {timeout:g} s; output: {out[-DETAIL_TAIL:]}"}
    except OSError as exc:
        return {"passed": False, "detail": f"check {argv[0]} could not start: {exc}"}
    out = done.stdout.decode("utf-8", "replace")
    marked = any(line.strip().startswith(FAIL_MARK) for line in out.splitlines())
    passed = done.returncode == 0 and not marked
    why = f"exit {done.returncode}" + (f", output says {FAIL_MARK}" if marked else "")
    return {"passed": passed, "detail": f"check {argv[0]}: {why}; output: {out[-DETAIL_TAIL:]}".strip()}


class ValidationRunner:
    """Runs at most one check per validation request (`requested_at`) in a thread.

    offer(node_answer): start the check when the answer says validating with a command not run yet.
    result(): (requested_at, {"passed", "detail"}) once the check ended, else None; done(requested_at) after
    the result was posted (or refused: the node moved on), so it is not run again."""

    def __init__(self, timeout: float = 300.0):
        self.timeout = float(timeout)
        self.finished_for: set = set()
        self._running: tuple | None = None  # (requested_at, thread, box)

    def offer(self, node: dict) -> bool:
        if not isinstance(node, dict) or node.get("state") != "validating":
            return False
        v = node.get("validation") or {}
        argv, requested = v.get("check_command"), v.get("requested_at")
        if not argv or not requested or requested in self.finished_for or "passed" in v:
            return False
        if self._running is not None:
            return False
        box: dict = {}
        thread = threading.Thread(target=lambda: box.update(run_check(list(argv), timeout=self.timeout)),
                                  name="node-validation", daemon=True)
        thread.start()
        self._running = (requested, thread, box)
        return True

    def result(self) -> tuple | None:
        if self._running is None or self._running[1].is_alive():
            return None
        requested, _, box = self._running
        return requested, dict(box) or {"passed": False, "detail": "the check ended without a result"}

    def done(self, requested) -> None:
        self.finished_for.add(requested)
        if self._running is not None and self._running[0] == requested:
            self._running = None
