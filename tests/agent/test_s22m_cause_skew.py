"""Version skew (trial 22, F4): an agent reports a task lost with the optional `cause` (agent_exited) to a server older
than the field, whose strict reports refuse it: a 400 naming tasks[i].cause. The agent dropped the whole call (its
other events and its output too, as a malformed one). Now it logs once that the server takes no cause and sends the
same events again without it, and every later lost report too. The server's side:
tests/platform/test_s22m_report_fields.py."""
from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuplatform.agent.runner import AgentLoop, refused_fields

ACCEPTED = "task, attempt, event, pid, exit_code, signal, message"


class OldServer:
    """A reports endpoint of a server before `cause`: a report holding a field it does not take (`cause` among them)
    is a 400 as the strict serializers word it (flattened: "tasks[i].cause"); else each event accepted."""

    def __init__(self):
        self.calls: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append(body)
                refused = {f"tasks[{i}].{k}": [f"unknown field (not dropped: the request is refused); accepted "
                                               f"fields: {ACCEPTED}"]
                           for i, e in enumerate(body["tasks"]) for k in e if k not in ACCEPTED.split(", ")}
                answer = refused or {"tasks": [{"task": e["task"], "attempt": e["attempt"], "event": e["event"],
                                                "accepted": True} for e in body["tasks"]], "logs": []}
                data = json.dumps(answer).encode()
                self.send_response(400 if refused else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Outbox:
    """The executor's reporting side (unreported / mark_reported), no processes."""

    def __init__(self, events):
        self.events = list(events)
        self.reported = []

    def unreported(self):
        return [e for e in self.events if (e["task"], e["attempt"], e["event"]) not in self.reported]

    def mark_reported(self, key, event):
        self.reported.append((*key, event))

    def pending_logs(self):
        return []

    def known(self, key):
        return True


@pytest.fixture
def old_server():
    server = OldServer()
    yield server
    server.server.shutdown()
    server.server.server_close()


LOST = {"task": 7, "attempt": 0, "event": "lost", "message": "the node agent exited", "cause": "agent_exited"}
EXITED = {"task": 8, "attempt": 0, "event": "exited", "exit_code": 0, "signal": None}


def test_a_refused_cause_is_sent_again_without_it_and_logged_once(old_server, caplog):
    outbox = Outbox([LOST, EXITED])
    loop = AgentLoop(old_server.url, "t", "n0", lambda: [], outbox, resources=(1000, 1024), timeout=5)
    with caplog.at_level(logging.WARNING, logger="gpuplatform.agent"):
        assert loop.report() is True
    assert [len(c["tasks"]) for c in old_server.calls] == [2, 2]
    assert old_server.calls[0]["tasks"][0]["cause"] == "agent_exited"
    assert old_server.calls[1]["tasks"] == [{k: v for k, v in LOST.items() if k != "cause"}, EXITED]
    assert sorted(outbox.reported) == [(7, 0, "lost"), (8, 0, "exited")]  # both taken, neither dropped
    warned = [r.getMessage() for r in caplog.records if "cause" in r.getMessage()]
    assert len(warned) == 1 and "does not take a lost report's cause" in warned[0], warned

    outbox.events.append({**LOST, "task": 9})  # a later lost report goes without it at once, with no new warning
    with caplog.at_level(logging.WARNING, logger="gpuplatform.agent"):
        assert loop.report() is True
    assert len(old_server.calls) == 3 and "cause" not in old_server.calls[2]["tasks"][0]
    assert len([r for r in caplog.records if "cause" in r.getMessage()]) == 1


def test_another_400_still_drops_the_call_and_keeps_the_cause(old_server):
    """A 400 that does not name `cause` is a malformed call as before (dropped, not sent again)."""
    outbox = Outbox([{**EXITED, "task": 3, "bogus": 1}])
    loop = AgentLoop(old_server.url, "t", "n0", lambda: [], outbox, resources=(1000, 1024), timeout=5)
    assert loop.report() is True and loop.send_cause is True and len(old_server.calls) == 1
    assert outbox.reported == [(3, 0, "exited")]  # dropped as malformed: not sent again


def test_refused_fields_reads_flat_and_nested_answers():
    assert refused_fields({"tasks[1].cause": ["unknown field"]}) == {"cause"}
    assert refused_fields({"tasks": [{}, {"cause": ["unknown field"]}]}) == {"tasks", "cause"}
    assert refused_fields({"detail": "cause"}) == {"detail"}
    assert refused_fields(None) == set()
