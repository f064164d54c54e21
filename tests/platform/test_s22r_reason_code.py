"""A pending job's reason is stored as the engine's code too (Job.pending_reason_code), by the cycle's one bulk write
of the pending rows (scheduling/store._update_pending), and cleared wherever the words are (a start, an end, a
requeue). The jobs API shows it; docs/api.md's list of codes is the engine's vocabulary
(scheduler.core.snapshot.PENDING_CODES), checked here against every code the engine's source gives.

The cycle's test runs on the database of the run (PostgreSQL: update_rows' UPDATE ... FROM unnest; SQLite: its
UPDATE ... FROM (VALUES ...)); run it with both DATABASE_URLs."""
from __future__ import annotations

import ast
import re
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

from gpuplatform import lifecycle, services
from gpuplatform.models import Job, Quota
from gpuplatform.scheduling import store
from scheduler.core.snapshot import PENDING_CODES

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def _codes_in_engine() -> set[str]:
    """Every reason code written in scheduler/: the first argument (or `code=`) of each PendingReason(...) given as a
    literal, and the never_fits_* literals handed to it through a variable (plugins/feasibility.host_never_fits; a
    module's __all__ names functions, not codes)."""
    found: set[str] = set()
    for path in (REPO / "scheduler").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        exported = {id(c) for a in ast.walk(tree) if isinstance(a, ast.Assign)
                    and any(getattr(t, "id", None) == "__all__" for t in a.targets) for c in ast.walk(a.value)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                    "PendingReason":
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "code"), None)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.add(arg.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exported and \
                    re.fullmatch(r"never_fits_[a-z_]+", node.value):
                found.add(node.value)
    return found


def test_the_vocabulary_is_every_code_the_engine_gives():
    assert _codes_in_engine() == set(PENDING_CODES)
    assert all(len(code) <= Job._meta.get_field("pending_reason_code").max_length for code in PENDING_CODES)


def test_the_api_docs_list_the_engines_codes():
    """docs/api.md's table between the pending-codes markers is generated from PENDING_CODES (paste `want` there)."""
    text = (REPO / "docs" / "api.md").read_text()
    block = re.search(r"<!-- pending-codes:[^\n]*-->\n(.*?)\n<!-- /pending-codes -->", text, re.S)
    want = "\n".join(["| code | meaning |", "| --- | --- |"] + [f"| `{k}` | {v} |" for k, v in PENDING_CODES.items()])
    assert block is not None and block.group(1) == want, want


def _states() -> dict[str, tuple]:
    return {name: (state, code, bool(reason), never) for name, state, code, reason, never in Job.objects.values_list(
        "name", "state", "pending_reason_code", "pending_reason", "never_fits")}


def test_a_cycle_stores_the_code_with_the_words_and_a_start_clears_it(cluster, submit):
    Quota.objects.filter(queue__name="alpha").update(limit=16)
    big = submit("big", tasks=3, gpus=8)  # 24 GPUs above alpha's limit of 16: refused for good
    fill = [submit(f"fill{i}", tasks=1, gpus=8, submitted_at=T0 + timedelta(seconds=i)) for i in range(2)]
    wait = submit("wait", tasks=1, gpus=8, submitted_at=T0 + timedelta(seconds=5))  # fits, after fill's 16 GPUs
    assert {Job.objects.get(pk=j.pk).pending_reason_code for j in (big, wait)} == {""}  # no cycle saw them yet
    store.run_cycle_once(clock=T0 + timedelta(seconds=10))
    assert _states() == {"big": ("pending", "never_fits_queue_limit", True, True),
                         "fill0": ("running", "", False, False), "fill1": ("running", "", False, False),
                         "wait": ("pending", "queue_limit", True, False)}
    # the same reason as the engine gives (its code and its words, written together)
    snapshot, _ = store.build_snapshot()
    from scheduler.core import run_cycle

    engine = run_cycle(snapshot).pending
    for job in (big, wait):
        row = Job.objects.filter(pk=job.pk).values_list("pending_reason_code", "pending_reason").get()
        assert row == (engine[job.pk].code, engine[job.pk].message)
    # room again: the waiting job starts and loses its code with its words; the refused one keeps both
    services.cancel_job(Job.objects.get(pk=fill[0].pk))
    store.run_cycle_once(clock=T0 + timedelta(seconds=20))
    assert _states()["wait"] == ("running", "", False, False)
    assert _states()["big"] == ("pending", "never_fits_queue_limit", True, True)
    services.cancel_job(Job.objects.get(pk=big.pk))  # an end clears both too
    assert _states()["big"][:3] == ("cancelled", "", False)


def test_a_requeue_clears_the_code_of_the_last_cycle(cluster, submit):
    job = submit("job", tasks=1, gpus=8)
    store.run_cycle_once(clock=T0)
    assert Job.objects.get(pk=job.pk).state == "running"
    Job.objects.filter(pk=job.pk).update(pending_reason_code="insufficient_gpus")  # as if left by an older writer
    assert lifecycle.requeue_job(job.pk, at=T0 + timedelta(seconds=5), kind="requeued", reason="node lost",
                                 backoff=False)
    assert Job.objects.filter(pk=job.pk).values_list("state", "pending_reason", "pending_reason_code").get() == (
        "pending", "node lost", "")


def test_the_jobs_api_shows_the_code(cluster, submit, client, django_user_model):
    Quota.objects.filter(queue__name="alpha").update(limit=16)
    big = submit("big", tasks=3, gpus=8)
    client.force_login(django_user_model.objects.create_user("ops", password="pw", is_staff=True,
                                                             is_superuser=True))
    assert client.get(f"/api/v1/jobs/{big.pk}/").json()["pending_reason_code"] == ""
    store.run_cycle_once(clock=T0)
    body = client.get(f"/api/v1/jobs/{big.pk}/").json()
    assert (body["pending_reason_code"], body["never_fits"]) == ("never_fits_queue_limit", True)
    listed = client.get("/api/v1/jobs/").json()["results"]
    assert [j["pending_reason_code"] for j in listed if j["id"] == big.pk] == ["never_fits_queue_limit"]
