"""A GPU an admin fenced (services.set_gpu_fence) is unhealthy to the hot-spare restart too (scheduling/spares.py),
as to the snapshot: a gang whose node is lost does not restart on a spare whose needed GPU is fenced."""
from __future__ import annotations

from datetime import timedelta

from gpuplatform import services
from gpuplatform.models import Event, Gpu, Job, Node
from gpuplatform.scheduling import failures
from tests.api.test_telemetry_api import T0, at, bind  # noqa: F401  (fixture)


def test_a_fenced_gpu_on_a_spare_is_not_used_for_a_restart(jobs, at):  # noqa: F811
    """As test_spares' unhealthy spare GPU: n3 (the spare) has GPU 1 fenced, so alpha's gang on n0 GPUs 0-1 waits
    for the cycle when n0 is lost; unfenced, the same loss restarts it on n3 at once."""
    services.set_spare("n3", True)
    gpu = Gpu.objects.get(node__name="n3", index=1)
    Gpu.objects.filter(pk=gpu.pk).update(fenced=True, fence_reason="fan swap")
    bind(jobs["own"], "n0", (0, 1), T0)
    Node.objects.filter(name="n0").update(last_heartbeat=T0 - timedelta(minutes=10))
    failures.detect_failures(at(60))
    job = Job.objects.get(pk=jobs["own"].pk)
    assert job.state == "pending" and not Event.objects.filter(kind="restarted_on_spare").exists()
    assert Node.objects.get(name="n3").spare is True
