"""The manager's client for one member cluster (urllib only; header `Authorization: Token <service token>`).

Endpoints on the worker (federation/worker_api.py), all under {api_url}/api/v1/federation/member/:

    GET  summary/                      -> summarize(snapshot) + {"time", "jobs": [{"id", "external_id", "state"}]}
    POST jobs/ (Idempotency-Key)       body: the job submission + "external_id" -> the job (201; a retry with the
                                       same key answers the same job, header Idempotent-Replayed: true)
    GET  jobs/?external_id=fed:7:g0    -> [the job] or []
    POST jobs/<id>/withdraw/           -> 200 {"withdrawn": true} while pending; 409 once it started
    POST jobs/<id>/cancel/             -> 200 the job (stops it, pending or running)
    GET  jobs/<id>/logs/?task=&offset= -> the worker's logs answer (proxied to the manager's job page)
    POST forecast/  {"kind": "submit", ...}  -> {"start_s": seconds from now or null, "reason"}

`MemberUnreachable`: no answer (network, timeout, 5xx) -- the sync counts it towards WORKER_LOST_SECONDS.
`MemberRefused(status, body)`: the worker answered 4xx.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings

__all__ = ["MemberClient", "MemberUnreachable", "MemberRefused"]


class MemberUnreachable(RuntimeError):
    pass


class MemberRefused(RuntimeError):
    def __init__(self, status: int, body):
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


class MemberClient:
    """One member's API. `timeout`: seconds per request (FEDERATION_HTTP_TIMEOUT)."""

    def __init__(self, api_url: str, token: str, timeout: float | None = None):
        self.base = api_url.rstrip("/") + "/api/v1/federation/member/"
        self.token = token
        self.timeout = timeout if timeout is not None else float(getattr(settings, "FEDERATION_HTTP_TIMEOUT", 5))
        self.last_bytes = 0

    def _call(self, method: str, path: str, body=None, headers: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Authorization": f"Token {self.token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw or b"null")
            except ValueError:
                parsed = raw[:300].decode(errors="replace")
            if exc.code >= 500:
                raise MemberUnreachable(f"HTTP {exc.code} from {self.base}{path}") from exc
            raise MemberRefused(exc.code, parsed) from exc
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise MemberUnreachable(f"{self.base}{path}: {exc}") from exc
        self.last_bytes = len(raw)
        try:
            return json.loads(raw or b"null")
        except ValueError as exc:
            raise MemberUnreachable(f"{self.base}{path}: not JSON") from exc

    def summary(self) -> dict:
        return self._call("GET", "summary/")

    def submit(self, body: dict, key: str) -> dict:
        return self._call("POST", "jobs/", body, {"Idempotency-Key": key})

    def find(self, external_id: str) -> dict | None:
        rows = self._call("GET", "jobs/?" + urllib.parse.urlencode({"external_id": external_id}))
        return rows[0] if rows else None

    def withdraw(self, remote_id: int) -> bool:
        """True when the worker cancelled the still-pending copy; False when it had started (409)."""
        try:
            return bool(self._call("POST", f"jobs/{int(remote_id)}/withdraw/", {})["withdrawn"])
        except MemberRefused as exc:
            if exc.status == 409:
                return False
            if exc.status == 404:  # nothing to withdraw: it never got there or is gone
                return True
            raise

    def cancel(self, remote_id: int, reason: str = "") -> dict | None:
        try:
            return self._call("POST", f"jobs/{int(remote_id)}/cancel/", {"reason": reason})
        except MemberRefused as exc:
            if exc.status == 404:
                return None
            raise

    def logs(self, remote_id: int, params: dict) -> dict:
        return self._call("GET", f"jobs/{int(remote_id)}/logs/?" + urllib.parse.urlencode(params))

    def estimate(self, change: dict) -> float | None:
        """Seconds from now the member's forecast would start a job like `change` (a what-if `submit`)."""
        return self._call("POST", "forecast/", change).get("start_s")
