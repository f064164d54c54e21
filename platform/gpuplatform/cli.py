"""gpuctl: a small command-line client for the REST API (stdlib only: argparse + urllib).

    export GPUCTL_API=http://127.0.0.1:8000 GPUCTL_TOKEN=<token from /api/v1/auth-token/ or the admin>
    gpuctl submit --queue alpha --name train-7b --tasks 4 --gpus 8 [--min-available 4] [--priority 5]
                  [--flavor H100] [--topology hard --highest-tier 2] [--time-limit 3600] [--team alpha]
    gpuctl submit --file job.json          # the POST /api/v1/jobs/ body as JSON
    gpuctl list [--state pending] [--queue alpha] [--team alpha] [--limit 50]
    gpuctl get 42
    gpuctl cancel 42 [--reason "wrong data"]
    gpuctl set-quota alpha H100 --guarantee 8 --quota 32 [--limit 64 | --no-limit]

`--json` prints the API's answers as they are. Exit status: 0 ok, 1 refused by the API (the field errors
are printed), 2 bad usage or the API unreachable. set-quota reads the quota's ETag and sends it back in
If-Match, so it fails (412) rather than overwrite a change made since.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


class ApiError(Exception):
    def __init__(self, status: int, body):
        self.status, self.body = status, body
        super().__init__(f"HTTP {status}")


class Client:
    def __init__(self, base: str, token: str, timeout: float = 30.0):
        self.base, self.token, self.timeout = base.rstrip("/"), token, timeout

    def request(self, method: str, path: str, body=None, headers: dict | None = None) -> tuple[object, dict]:
        url = path if path.startswith("http") else f"{self.base}{path}"
        req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
        req.add_header("Accept", "application/json")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Token {self.token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return (json.loads(raw) if raw else None), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                detail = json.loads(raw)
            except ValueError:
                detail = raw.decode(errors="replace")
            raise ApiError(exc.code, detail) from None

    def get(self, path, **params):
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        return self.request("GET", f"{path}?{query}" if query else path)


def _table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _job_line(j: dict) -> list:
    where = ",".join(j.get("nodes") or []) or (f"#{j['position']} {j['pending_reason']}" if j["state"] == "pending" else "")
    return [j["id"], j["name"], j["team"], j["queue"], j["state"], j["gpus"], j["priority"], where[:60]]


JOB_HEADER = ["ID", "NAME", "TEAM", "QUEUE", "STATE", "GPUS", "PRIO", "NODES / POSITION REASON"]


def cmd_submit(client: Client, a) -> object:
    if a.file:
        try:
            with open(a.file) as fh:
                body = json.load(fh)
        except OSError as exc:
            raise SystemExit(f"gpuctl submit: cannot read {a.file}: {exc.strerror}") from None
        except ValueError as exc:
            raise SystemExit(f"gpuctl submit: {a.file} is not valid JSON: {exc}") from None
    else:
        if not (a.queue and a.name):
            raise SystemExit("gpuctl submit: --queue and --name are required (or --file)")
        role = {"name": a.role, "tasks": a.tasks, "gpus_per_task": a.gpus, "flavor": a.flavor or ""}
        if a.min_available is not None:
            role["min_available"] = a.min_available
        if a.cpu_milli:
            role["cpu_milli"] = a.cpu_milli
        body = {"name": a.name, "queue": a.queue, "priority": a.priority, "roles": [role],
                "topology_mode": a.topology, "highest_tier": a.highest_tier, "time_limit_seconds": a.time_limit}
        if a.team:
            body["team"] = a.team
        if a.no_preempt:
            body["preemptible"] = False
    job, _ = client.request("POST", "/api/v1/jobs/", body)
    return job


def cmd_list(client: Client, a) -> object:
    page, _ = client.get("/api/v1/jobs/", state=a.state, queue=a.queue, team=a.team, limit=a.limit)
    return page


def cmd_get(client: Client, a) -> object:
    return client.get(f"/api/v1/jobs/{a.id}/")[0]


def cmd_cancel(client: Client, a) -> object:
    return client.request("POST", f"/api/v1/jobs/{a.id}/cancel/", {"reason": a.reason or ""})[0]


def cmd_set_quota(client: Client, a) -> object:
    found, _ = client.get("/api/v1/quotas/", queue=a.queue, flavor=a.flavor)
    limit = None if a.no_limit else a.limit
    if not found["results"]:
        body = {"queue": a.queue, "flavor": a.flavor, "guarantee": a.guarantee or 0, "quota": a.quota or 0,
                "limit": limit}
        return client.request("POST", "/api/v1/quotas/", body)[0]
    url = f"/api/v1/quotas/{found['results'][0]['id']}/"
    current, headers = client.request("GET", url)
    etag = headers.get("ETag") or headers.get("Etag")
    body = {k: v for k, v in (("guarantee", a.guarantee), ("quota", a.quota)) if v is not None}
    if a.no_limit or a.limit is not None:
        body["limit"] = limit
    return client.request("PATCH", url, body, headers={"If-Match": etag})[0]


def _print(result, a, command: str) -> None:
    if a.json:
        print(json.dumps(result, indent=2))
    elif command == "list":
        print(_table([_job_line(j) for j in result["results"]], JOB_HEADER))
        if result.get("next"):
            print(f"... {result['count']} jobs in all; use --limit")
    elif command in ("submit", "get", "cancel"):
        print(_table([_job_line(result)], JOB_HEADER))
    elif command == "set-quota":
        print(f"{result['queue']}/{result['flavor']}: guarantee {result['guarantee']}, quota {result['quota']}, "
              f"limit {'none' if result['limit'] is None else result['limit']}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuctl", description="GPU platform command-line client (REST API).")
    p.add_argument("--api", default=os.environ.get("GPUCTL_API", "http://127.0.0.1:8000"),
                   help="API base URL (env GPUCTL_API)")
    p.add_argument("--token", default=os.environ.get("GPUCTL_TOKEN", ""), help="API token (env GPUCTL_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's JSON answers")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("submit", help="submit a job (one role, or --file for the full body)")
    s.add_argument("--file", help="JSON body of POST /api/v1/jobs/")
    s.add_argument("--queue")
    s.add_argument("--name")
    s.add_argument("--team", help="team slug (default: the queue's)")
    s.add_argument("--role", default="worker")
    s.add_argument("--tasks", type=int, default=1)
    s.add_argument("--gpus", type=int, default=1, help="GPUs per task")
    s.add_argument("--cpu-milli", type=int, default=0)
    s.add_argument("--min-available", type=int)
    s.add_argument("--flavor", help="GPU model(s), e.g. H100 or 'H100|A100'")
    s.add_argument("--priority", type=int, default=0)
    s.add_argument("--no-preempt", action="store_true", help="not preemptible")
    s.add_argument("--topology", choices=["none", "soft", "hard"], default="none")
    s.add_argument("--highest-tier", type=int)
    s.add_argument("--time-limit", type=int, help="seconds (lets backfill use the job)")

    s = sub.add_parser("list", help="list jobs you may see")
    s.add_argument("--state")
    s.add_argument("--queue")
    s.add_argument("--team")
    s.add_argument("--limit", type=int, default=50)

    s = sub.add_parser("get", help="one job")
    s.add_argument("id", type=int)

    s = sub.add_parser("cancel", help="cancel a job")
    s.add_argument("id", type=int)
    s.add_argument("--reason")

    s = sub.add_parser("set-quota", help="create or change a queue's quota for a GPU flavor (platform admins)")
    s.add_argument("queue")
    s.add_argument("flavor")
    s.add_argument("--guarantee", type=int)
    s.add_argument("--quota", type=int)
    limit = s.add_mutually_exclusive_group()
    limit.add_argument("--limit", type=int)
    limit.add_argument("--no-limit", action="store_true", help="no cap of its own (the parent's)")
    return p


COMMANDS = {"submit": cmd_submit, "list": cmd_list, "get": cmd_get, "cancel": cmd_cancel, "set-quota": cmd_set_quota}


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if not a.api.startswith(("http://", "https://")):
        print(f"gpuctl: the API address must start with http:// or https:// (got {a.api!r}; set GPUCTL_API)",
              file=sys.stderr)
        return 2
    client = Client(a.api, a.token)
    try:
        result = COMMANDS[a.command](client, a)
    except ApiError as exc:
        print(f"gpuctl: refused (HTTP {exc.status})", file=sys.stderr)
        if isinstance(exc.body, dict):
            for field, problems in exc.body.items():
                for problem in problems if isinstance(problems, list) else [problems]:
                    print(f"  {field}: {problem}", file=sys.stderr)
        else:
            print(f"  {exc.body}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"gpuctl: cannot reach {a.api}: {exc}", file=sys.stderr)
        return 2
    _print(result, a, a.command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
