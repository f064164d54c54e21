"""Federation with two real worker instances on loopback (marked `services`: needs PostgreSQL).

- worker "a": pytest-django's live_server on the test database (PostgreSQL), the small 4 x 8 H100 cluster;
- worker "b": `manage.py runserver` in a subprocess on its OWN database (a SQLite file), the same cluster
  spec, labelled data-site=lyon;
- the manager: this test process (its federation tables live in the test database; it reaches both workers
  only over HTTP with their scoped service tokens, federation/client.py).

One scenario, in order: dispatch by score (data site), `clusters` honoured, a manager that loses the answer
of a create and retries makes one copy, cancel at the manager stops the worker's copy, worker b stopped for
longer than WORKER_LOST_SECONDS -> its pending job moves to a, b restarted -> b's stale copy is stopped.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from gpuplatform.federation import dispatch, manager
from gpuplatform.federation.client import MemberClient, MemberUnreachable
from gpuplatform.federation.worker_api import make_service_account
from gpuplatform.models import FederatedJob, Job, MemberCluster, Team

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
SETUP_B = """
from gpuplatform import services
from gpuplatform.federation.worker_api import make_service_account
from tests.platform.helpers_platform import small_spec
services.load_cluster_spec(small_spec())
print("TOKEN=" + make_service_account()[1])
"""
BODY = {"name": "train", "queue": "alpha", "command": ["sleep", "600"],
        "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}]}


@pytest.fixture(autouse=True)
def _postgres_or_fail():
    from django.conf import settings

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        if os.environ.get("CI"):
            pytest.fail("CI is set and DATABASE_URL does not point at PostgreSQL")
        pytest.skip("DATABASE_URL does not point at PostgreSQL")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WorkerB:
    """A second instance: its own SQLite database, migrated and loaded once; start() / stop() the server."""

    def __init__(self, tmp: Path):
        self.db = tmp / "worker-b.sqlite3"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "worker-b.log"
        self.env = {**os.environ, "DATABASE_URL": f"sqlite:///{self.db}", "REDIS_URL": "",
                    "DJANGO_SETTINGS_MODULE": "gpuplatform.settings", "FORECAST_SECONDS": "0",
                    "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform"), os.environ.get("PYTHONPATH", "")])}
        self.proc = None
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=self.env,
                       check=True, capture_output=True, timeout=300)
        made = subprocess.run([sys.executable, "manage.py", "shell", "-c", SETUP_B], cwd=REPO, env=self.env,
                              check=True, capture_output=True, text=True, timeout=300)
        self.token = made.stdout.split("TOKEN=", 1)[1].split()[0]

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                                     cwd=REPO, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            try:
                MemberClient(self.url, self.token, timeout=2).summary()
                return
            except MemberUnreachable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker b did not start:\n{self.log.read_text()[-3000:]}")
                time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


@pytest.fixture
def worker_b(tmp_path):
    w = WorkerB(tmp_path)
    w.start()
    yield w
    w.stop()


def _copies(client: MemberClient, job: FederatedJob, generation: int | None = None) -> list[dict]:
    return [c for c in client.summary()["jobs"]
            if c["external_id"] == f"fed:{job.pk}:g{job.generation if generation is None else generation}"]


def test_two_live_workers(live_server, worker_b, settings):
    from gpuplatform import services
    from tests.platform.helpers_platform import small_spec

    settings.FEDERATION_USE_WHATIF = True
    settings.WORKER_LOST_SECONDS = 900
    settings.FEDERATION_ROLE = "manager"  # this process is the manager (and worker a's API)
    services.load_cluster_spec(small_spec())  # worker a's cluster (and the manager's teams and queues)
    _svc, token_a = make_service_account()
    member = get_user_model().objects.create_user("mike", password="pw")
    alpha = Team.objects.get(name="alpha")
    services.add_member(alpha, member, "member")
    manager.register_cluster(name="a", api_url=live_server.url, token=token_a, labels={"data-site": "paris"})
    manager.register_cluster(name="b", api_url=worker_b.url, token=worker_b.token, labels={"data-site": "lyon"})
    a, b = MemberClient(live_server.url, token_a), MemberClient(worker_b.url, worker_b.token)

    def submit(**extra):
        return manager.submit_federated_job(team=alpha, body={**BODY, **extra}, submitter=member)

    near_data = submit(name="lyon-data", data_site="lyon")
    pinned = submit(name="pinned", clusters=["a"], data_site="lyon")
    out = dispatch.run_round()
    assert out["synced"] == 2 and out["dispatched"] == 2
    near_data.refresh_from_db(), pinned.refresh_from_db()
    assert near_data.cluster.name == "b" and near_data.state == "dispatched"
    assert pinned.cluster.name == "a"
    assert all(c["forecast"] for c in near_data.decision["candidates"])  # both workers' what-if answered
    assert len(_copies(b, near_data)) == 1 and not _copies(a, near_data)
    assert Job.objects.filter(external_id=f"fed:{pinned.pk}:g0").count() == 1  # worker a's own table
    assert MemberCluster.objects.get(name="b").summary["flavors"]["H100"]["total"] == 32

    # the job's logs through the manager come from its worker (a team member of another team gets a 404)
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(member)
    r = api.get(f"/api/v1/federation/jobs/{pinned.pk}/logs/", {"task": "worker-0"})
    assert r.status_code == 200, r.content
    assert r.json()["name"] == "worker-0" and r.json()["next_offset"] == 0
    assert api.get(f"/api/v1/federation/jobs/{pinned.pk}/logs/", {"task": "nope-3"}).status_code == 400

    # the manager loses the answer of a create it sent; the retry with the same key makes no second copy
    crash = submit(name="crash", data_site="lyon")

    class LosesAnswer(MemberClient):
        def submit(self, body, key):
            super().submit(body, key)
            raise MemberUnreachable("connection reset after the request")

    dispatch.dispatch_pending(client_for=lambda c: LosesAnswer(c.api_url, c.token()))
    crash.refresh_from_db()
    assert crash.state == "dispatching" and crash.remote_id is None and len(_copies(b, crash)) == 1
    dispatch.dispatch_pending()
    crash.refresh_from_db()
    assert crash.state == "dispatched" and crash.remote_id == _copies(b, crash)[0]["id"]
    assert len(_copies(b, crash)) == 1

    # cancel at the manager stops the worker's copy
    manager.cancel_federated_job(near_data, actor=member)
    assert [c["state"] for c in _copies(b, near_data)] == ["cancelled"]

    # worker b goes away for longer than WORKER_LOST_SECONDS: its pending job moves to a
    worker_b.stop()
    t0 = timezone.now()
    dispatch.run_round(now=t0)
    assert MemberCluster.objects.get(name="b").state == "unreachable"
    dispatch.run_round(now=t0 + timedelta(seconds=901))
    crash.refresh_from_db()
    assert MemberCluster.objects.get(name="b").state == "lost"
    assert crash.cluster.name == "a" and crash.generation == 1 and crash.state == "dispatched"
    assert Job.objects.filter(external_id=f"fed:{crash.pk}:g1").count() == 1

    # b comes back still holding the old copy: the first sync stops it
    worker_b.start()
    assert [c["state"] for c in _copies(b, crash, generation=0)] == ["pending"]
    dispatch.run_round(now=t0 + timedelta(seconds=1000))
    assert MemberCluster.objects.get(name="b").state == "healthy"
    assert [c["state"] for c in _copies(b, crash, generation=0)] == ["cancelled"]
    live = [c for cl in (a, b) for c in cl.summary()["jobs"] if c["state"] not in ("cancelled", "failed", "succeeded")
            and c["external_id"].startswith(f"fed:{crash.pk}:")]
    assert len(live) == 1  # one live copy of the moved job across both workers
