"""The fault suite's own production stack, started from nothing for this module and torn down after it:

- PostgreSQL: `initdb` + `pg_ctl` on a spare port, in a temporary directory (as the `postgres` user when
  the tests run as root, since PostgreSQL refuses root), fsync off;
- `redis-server` on a spare port, no persistence;
- `celery -A gpuplatform worker --pool=solo`;
- the web app under gunicorn (2 workers, persistent database connections: DB_CONN_MAX_AGE=60), seeded
  with the small cluster (4 x 8 H100, queues alpha / beta) and a platform admin with an API token.

`Stack` can stop and start each service (PostgreSQL keeps its data, Redis comes back empty like a
restarted cache) and kill the worker. Marked `services`: skipped on a laptop without the binaries, FAILS in
CI (CI set) so CI can never go green by skipping it. Each test is bounded (timeouts on every wait).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.agent.proc_helpers import wait_for as _wait_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BINARIES = ("initdb", "pg_ctl", "redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, step: float = 0.2):
    """proc_helpers.wait_for at this suite's pace (services answer in tenths of seconds)."""
    return _wait_for(predicate, timeout, what, step)


class Stack:
    def __init__(self, root: Path):
        self.root = root
        self.pg_port, self.redis_port, self.web_port = free_port(), free_port(), free_port()
        self.pgdata = root / "pgdata"
        self.as_postgres = os.geteuid() == 0
        self.database_url = f"postgres://postgres@127.0.0.1:{self.pg_port}/faults"
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.redis = self.worker = self.web = None
        self.token = ""
        self.env = {**os.environ, "DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url,
                    "DJANGO_SETTINGS_MODULE": "gpuplatform.settings", "DB_CONN_MAX_AGE": "60",
                    "SCHEDULER_CYCLE_SECONDS": "5", "JOB_SUBMIT_THROTTLE": "10000/min",
                    "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform")])}
        for k in ("DJANGO_PRODUCTION", "CELERY_RESULT_BACKEND", "DEBUG"):
            self.env.pop(k, None)

    # --- PostgreSQL ------------------------------------------------------------------------------
    def _pg(self, *args, check=True) -> subprocess.CompletedProcess:
        cmd = list(args)
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=check)

    def pg_init(self) -> None:
        self.pgdata.mkdir()
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.pgdata, "postgres")
        self._pg("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.pg_start()
        self._pg("psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres", "-c", "CREATE DATABASE faults")

    def pg_start(self) -> None:
        self._pg("pg_ctl", "-D", str(self.pgdata), "-l", str(self.pgdata / "log.txt"), "-w", "-t", "60", "-o",
                 f"-p {self.pg_port} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "
                 f"-k {self.pgdata}", "start")

    def pg_stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "60", "stop", check=False)

    def sql(self, query: str, *params):
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.pg_port} user=postgres dbname=faults",
                             connect_timeout=5, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    # --- Redis -----------------------------------------------------------------------------------
    def redis_start(self) -> None:
        self.redis = subprocess.Popen(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        wait_for(lambda: _reachable(self.redis_port), 20, "redis-server")

    def redis_stop(self) -> None:
        if self.redis is not None:
            self.redis.kill()
            self.redis.wait(10)
            self.redis = None

    # --- Django, worker, web ---------------------------------------------------------------------
    def manage(self, *args) -> str:
        r = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
        return r.stdout

    def seed(self) -> None:
        self.manage("migrate", "--noinput")
        out = self.manage("shell", "-c", (
            "from gpuplatform import services; from tests.platform.helpers_platform import small_spec; "
            "from django.contrib.auth import get_user_model; from gpuplatform.services import issue_api_token; "
            "services.load_cluster_spec(small_spec()); "
            "u = get_user_model().objects.create_user('ops', password='x-unused-9Q', is_staff=True); "
            "print('TOKEN=' + issue_api_token(u)[0])"))
        self.token = out.split("TOKEN=")[1].split()[0]

    def worker_start(self) -> None:
        self.worker_log = self.root / f"worker-{time.monotonic_ns()}.log"
        with open(self.worker_log, "wb") as log:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "gpuplatform", "worker", "--pool=solo", "-l", "info",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: b" ready." in self.worker_log.read_bytes() or self.worker.poll() is not None, 60,
                 "the celery worker")
        assert self.worker.poll() is None, self.worker_log.read_text()[-3000:]

    def worker_kill(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGKILL)
            self.worker.wait(10)
        self.worker = None

    def web_start(self) -> None:
        self.web_log = self.root / "web.log"
        with open(self.web_log, "wb") as log:
            self.web = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "gpuplatform.wsgi:application", "--bind",
                 f"127.0.0.1:{self.web_port}", "--workers", "2", "--timeout", "30", "--max-requests", "1000"],
                cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.get("/healthz", timeout=2)[0] == 200, 60, "the web app")

    def stop_all(self) -> None:
        for proc in (self.web, self.worker):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self.redis_stop()
        self.pg_stop()

    # --- HTTP ------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, timeout: float = 30) -> tuple[int, dict, float, dict]:
        """(status, JSON body or {}, seconds taken, headers)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.web_port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Token {self.token}",
                                              "Content-Type": "application/json", "Accept": "application/json"})
        started = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw, headers = r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            status, raw, headers = e.code, e.read(), dict(e.headers)
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            return 0, {"error": repr(e)}, time.monotonic() - started, {}
        took = time.monotonic() - started
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = {"raw": raw[:300].decode(errors="replace")}
        return status, payload, took, headers

    def get(self, path: str, timeout: float = 30):
        return self.request("GET", path, timeout=timeout)

    def submit(self, name: str, gpus: int = 1):
        return self.request("POST", "/api/v1/jobs/", {"name": name, "queue": "alpha", "command": "sleep 3600",
                                                     "roles": [{"tasks": 1, "gpus_per_task": gpus}]})

    # --- invariants ------------------------------------------------------------------------------
    def assert_consistent(self) -> None:
        """No GPU has two live allocations; every running job holds exactly its whole gang; nothing else
        holds GPUs."""
        assert self.sql("SELECT gpu_id FROM gpuplatform_allocation WHERE released_at IS NULL "
                        "GROUP BY gpu_id HAVING count(*) > 1") == []
        want = dict(self.sql("SELECT r.job_id, sum(r.tasks * r.gpus_per_task) FROM gpuplatform_jobrole r "
                             "JOIN gpuplatform_job j ON j.id = r.job_id WHERE j.state IN ('running', 'bound') "
                             "GROUP BY r.job_id"))
        held = dict(self.sql("SELECT job_id, count(*) FROM gpuplatform_allocation WHERE released_at IS NULL "
                             "GROUP BY job_id"))
        assert held == want


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def stack():
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the fault suite's binaries are missing: {missing}")
        pytest.skip(f"missing {missing}")
    root = Path(tempfile.mkdtemp(prefix="gpuplatform-faults-"))
    s = Stack(root)
    try:
        s.pg_init()
        s.redis_start()
        s.seed()
        s.worker_start()
        s.web_start()
        yield s
    finally:
        s.stop_all()
        shutil.rmtree(root, ignore_errors=True)
