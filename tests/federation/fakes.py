"""FakeMember, an in-memory worker that answers as federation/client.py's MemberClient does: it keeps its
copies by id, replays a create with a used Idempotency-Key (same body -> same copy), withdraws only pending
copies, and can be made unreachable, or to lose the answer of a create it did perform (a manager crash
mid-dispatch)."""
from __future__ import annotations

from gpuplatform.federation.client import MemberRefused, MemberUnreachable


def summary(total=32, free=32, pending_gpus=0, used=0, guarantee=4, quota=16, limit=32):
    return {"flavors": {"H100": {"total": total, "free": free, "node_gpus": 8, "domain_gpus": {"1": 16, "2": total},
                                 "largest_free": {"1": min(free, 16), "2": free}}},
            "queues": {"alpha": {"H100": {"guarantee": guarantee, "quota": quota, "limit": limit, "used": used}},
                       "beta": {"H100": {"guarantee": 0, "quota": 16, "limit": None, "used": 0}}},
            "pending_jobs": 1 if pending_gpus else 0, "pending_gpus": pending_gpus, "running_jobs": 0}


class FakeMember:
    def __init__(self, name, **state):
        self.name = name
        self.state = summary(**state)
        self.jobs: dict[int, dict] = {}
        self.keys: dict[str, tuple[str, int]] = {}
        self.reachable = True
        self.token_refused = False  # answers 401, as a worker whose token for the manager was revoked
        self.lose_next_answer = False
        self.estimates: float | None = None
        self.creates = 0
        self.estimate_calls = 0
        self.last_bytes = 0
        self._next = 100

    def _up(self):
        if not self.reachable:
            raise MemberUnreachable(f"{self.name} is down")
        if self.token_refused:
            raise MemberRefused(401, {"detail": "Invalid token."})

    def summary(self):
        self._up()
        out = {**self.state, "jobs": [{"id": i, "external_id": j["external_id"], "state": j["state"]}
                                      for i, j in self.jobs.items()]}
        self.last_bytes = len(repr(out))
        return out

    def submit(self, body, key):
        self._up()
        fp = repr(sorted(body.items()))
        if key in self.keys:
            old_fp, jid = self.keys[key]
            if old_fp != fp:
                raise MemberRefused(409, {"Idempotency-Key": ["used for another request"]})
        else:
            self._next += 1
            jid = self._next
            self.jobs[jid] = {"external_id": body["external_id"], "state": "pending", "body": body}
            self.keys[key] = (fp, jid)
            self.creates += 1
        if self.lose_next_answer:  # the copy exists; the manager never hears of it
            self.lose_next_answer = False
            raise MemberUnreachable("connection reset after the request was sent")
        return {"id": jid, "external_id": body["external_id"], "state": self.jobs[jid]["state"]}

    def find(self, external_id):
        self._up()
        return next(({"id": i, **j} for i, j in self.jobs.items() if j["external_id"] == external_id), None)

    def withdraw(self, remote_id):
        self._up()
        j = self.jobs.get(remote_id)
        if j is None:
            return True
        if j["state"] != "pending":
            return False
        j["state"] = "cancelled"
        return True

    def cancel(self, remote_id, reason=""):
        self._up()
        j = self.jobs.get(remote_id)
        if j is None:
            return None
        if j["state"] not in ("succeeded", "failed", "cancelled"):
            j["state"] = "cancelled"
        return {"id": remote_id, **j}

    def estimate(self, change):
        self.estimate_calls += 1
        self._up()
        return self.estimates

    # helpers for the tests
    def live(self):
        return [j for j in self.jobs.values() if j["state"] in ("pending", "running")]

    def running(self):
        return [j for j in self.jobs.values() if j["state"] == "running"]

    def start_all(self):
        for j in self.jobs.values():
            if j["state"] == "pending":
                j["state"] = "running"
