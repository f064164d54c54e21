"""Load test of the web tier (issue #12): N virtual users (threads, stdlib only) for a fixed time against a
running control plane, or against a stack this script starts itself (`--start`: its own PostgreSQL,
Redis, Celery worker + beat-like cycle requests, gunicorn with 3 workers, as tests/faults/ builds it).

Each user loops: submit a 1-2 GPU job (40 %), list jobs (35 %), read one of its jobs (15 %), read events
(5 %), /healthz (5 %). Reports: requests, errors by status (a 5xx is a failure), p50 / p95 latency per
kind, submissions accepted (201) against job rows stored, and scheduling-cycle latency under load (the
cycles that ran during the window, from SchedulerCycle; --start only).

    .venv/bin/python benchmarks/load/run.py --start --users 20 --seconds 60
    .venv/bin/python benchmarks/load/run.py --url http://127.0.0.1:8000 --token <key> --queue alpha
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


class Client:
    def __init__(self, url: str, token: str):
        self.url, self.token = url.rstrip("/"), token

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Token {self.token}", "Content-Type": "application/json"})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except Exception:  # noqa: BLE001 - a connection error counts as status 0
            status, raw = 0, b""
        return status, raw, time.perf_counter() - started


def user(client: Client, queue: str, stop: threading.Event, out: dict, lock: threading.Lock, seed: int):
    rnd = random.Random(seed)
    mine: list[int] = []
    while not stop.is_set():
        r = rnd.random()
        if r < 0.40:
            kind = "submit"
            status, raw, took = client.call("POST", "/api/v1/jobs/", {
                "name": f"load-{seed}-{len(mine)}", "queue": queue, "command": "sleep 600",
                "roles": [{"tasks": 1, "gpus_per_task": rnd.choice((1, 2))}]})
            if status == 201:
                mine.append(json.loads(raw)["id"])
        elif r < 0.75:
            kind, (status, raw, took) = "list", client.call("GET", "/api/v1/jobs/?limit=20")
        elif r < 0.90 and mine:
            kind, (status, raw, took) = "detail", client.call("GET", f"/api/v1/jobs/{rnd.choice(mine)}/")
        elif r < 0.95:
            kind, (status, raw, took) = "events", client.call("GET", "/api/v1/events/?limit=20")
        else:
            kind, (status, raw, took) = "healthz", client.call("GET", "/healthz")
        with lock:
            out["lat"][kind].append(took)
            out["status"][status] += 1
            if kind == "submit" and status == 201:
                out["accepted"].append(mine[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--token")
    ap.add_argument("--queue", default="alpha")
    ap.add_argument("--start", action="store_true", help="start a private stack (PostgreSQL, Redis, worker, gunicorn)")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args(argv)
    stack = None
    if args.start:
        sys.path[:0] = [str(REPO), str(REPO / "platform")]
        from tests.faults.conftest import Stack

        stack = Stack(Path(tempfile.mkdtemp(prefix="gpuplatform-load-")))
        stack.pg_init()
        stack.redis_start()
        stack.seed()
        stack.worker_start()
        stack.web_start()
        url, token = f"http://127.0.0.1:{stack.web_port}", stack.token
    else:
        url, token = args.url, args.token
    try:
        out = {"lat": defaultdict(list), "status": Counter(), "accepted": []}
        lock, stop = threading.Lock(), threading.Event()
        t0_wall = time.time()
        threads = [threading.Thread(target=user, args=(Client(url, token), args.queue, stop, out, lock, i), daemon=True)
                   for i in range(args.users)]
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join(90)
        summary = {
            "users": args.users, "seconds": args.seconds,
            "requests": sum(out["status"].values()),
            "rps": round(sum(out["status"].values()) / args.seconds, 1),
            "status": {str(k): v for k, v in sorted(out["status"].items())},
            "errors_5xx": sum(v for k, v in out["status"].items() if k >= 500 or k == 0),
            "latency_ms": {k: {"n": len(v), "p50": round(1000 * pct(v, 0.5), 1), "p95": round(1000 * pct(v, 0.95), 1)}
                           for k, v in sorted(out["lat"].items())},
            "submissions_accepted": len(out["accepted"]),
        }
        if stack is not None:
            time.sleep(2)
            ids = out["accepted"]
            summary["job_rows_stored"] = stack.sql("SELECT count(*) FROM gpuplatform_job WHERE id = ANY(%s)", ids)[0][0]
            summary["job_rows_total"] = stack.sql("SELECT count(*) FROM gpuplatform_job")[0][0]
            durations = [r[0] for r in stack.sql(
                "SELECT duration_ms FROM gpuplatform_schedulercycle WHERE started_at >= to_timestamp(%s) "
                "AND error = ''", t0_wall)]
            summary["cycles"] = {"n": len(durations), "p50_ms": round(statistics.median(durations), 1) if durations else None,
                                 "p95_ms": round(pct(durations, 0.95), 1) if durations else None}
            doubled = stack.sql("SELECT count(*) FROM (SELECT gpu_id FROM gpuplatform_allocation WHERE released_at "
                                "IS NULL GROUP BY gpu_id HAVING count(*) > 1) d")[0][0]
            summary["double_bound_gpus"] = doubled
        print(json.dumps(summary, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2))
        return 1 if summary["errors_5xx"] else 0
    finally:
        if stack is not None:
            stack.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
