"""The queueing page names the rule that refuses a never-fits job from the code the cycle stored with its reason
(Job.pending_reason_code), for every job the engine refuses so: a job of GPU shares (the sharing pass's limit rule)
and a job whose roles run on different flavors (the mixed-flavor allocator's quota rule) too. The page rebuilt the
queues and re-ran the whole-GPU rule before, which skipped both, so they read "does not fit this cluster" though
they fit it."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec
from gpuplatform import services
from gpuplatform.models import Job, Node, Queue, Team
from gpuplatform.scheduling import store

pytestmark = pytest.mark.django_db
CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


@pytest.fixture
def two_flavors(db):
    """Nodes h0 (8 H100, GPUs 0-1 shared) and a0 (8 A100); queue q (team alpha): H100 limit 1 GPU, A100 quota 2."""
    services.load_cluster_spec(ClusterSpec(
        name="two", domains=(DomainSpec("leaf", 2),),
        nodes=(NodeSpec("h0", "H100", 8, domain="leaf"), NodeSpec("a0", "A100", 8, domain="leaf")),
        queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 1, 1), "A100": (0, 2, None)}),)))
    h0 = Node.objects.get(name="h0")
    for i in (0, 1):
        services.set_gpu_sharing(h0, i, "shared")
    return Queue.objects.get(name="q")


def _submit(queue, name: str, roles: list[dict], **kw) -> Job:
    return services.submit_job(team=Team.objects.get(name="alpha"), queue=queue, name=name, command=["sleep", "60"],
                               roles=roles, **kw)


def _estimate_cell(client, name: str) -> str:
    html = client.get("/queueing/").content.decode()
    row = html[html.index(f">{name}</a>"):]
    cell = row[row.index('<td class="estimate">') + len('<td class="estimate">'):]
    return cell[:cell.index("</td>")]


def test_a_sharing_job_and_a_mixed_flavor_job_name_their_queue_rule(client, two_flavors, django_user_model):
    # 4 tasks of half a GPU: 2 GPU-equivalents, above q's H100 limit of 1 (the cluster holds them: 2 shared GPUs)
    shares = _submit(two_flavors, "shares", [{"name": "w", "tasks": 4, "gpu_fraction": 0.5,
                                              "flavor": "H100"}])
    # non-preemptible, 1 H100 GPU and 4 A100 GPUs: above q's A100 quota of 2, and it may not borrow
    mixed = _submit(two_flavors, "mixed", [{"name": "h", "tasks": 1, "gpus_per_task": 1, "flavor": "H100"},
                                           {"name": "a", "tasks": 1, "gpus_per_task": 4, "flavor": "A100"}],
                    preemptible=False)
    store.run_cycle_once(clock=CLOCK)
    codes = dict(Job.objects.values_list("name", "pending_reason_code"))
    assert codes == {"shares": "never_fits_queue_limit", "mixed": "never_fits_queue_quota"}
    assert Job.objects.filter(pk__in=[shares.pk, mixed.pk], never_fits=True).count() == 2
    client.force_login(django_user_model.objects.create_user("admin", password="pw", is_staff=True,
                                                             is_superuser=True))
    assert _estimate_cell(client, "shares") == "never (above a queue&#x27;s limit)"
    assert _estimate_cell(client, "mixed") == (
        "never (non-preemptible, above a queue&#x27;s quota: it may not borrow)")
