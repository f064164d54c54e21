"""The /federation/ page: every member cluster with its synced state and the age of its last sync, and the
federated jobs the viewer may see (where each went, and why)."""
from .. import access
from ..login import login_required
from django.shortcuts import render
from django.utils import timezone

from ..inputs import html_only
from ..models import FederatedJob, MemberCluster
from .manager import job_gpu_figures, visible_federated_jobs


@login_required
@html_only("/api/v1/federation/clusters/ and /api/v1/federation/jobs/ (the REST API)")
def federation_page(request):
    now = timezone.now()
    clusters = []
    for c in MemberCluster.objects.all():
        s = c.summary or {}
        clusters.append({"c": c, "age": round((now - c.last_sync_at).total_seconds()) if c.last_sync_at else None,
                         "flavors": sorted((f, v.get("free", 0), v.get("total", 0)) for f, v in s.get("flavors", {}).items()),
                         "pending": s.get("pending_jobs", 0), "running": s.get("running_jobs", 0)})
    jobs = list(visible_federated_jobs(request.user)[:200])
    for job in jobs:  # GPU-equivalents, as the API's `gpus` (a half-GPU job read 1 here: trial 17, F4)
        job.gpu_equivalents, job.gpu_request_text = job_gpu_figures(job)
        # its Cancel button: the API's rule (members and admins of the job's team), while it has not ended
        job.can_cancel = job.state not in FederatedJob.ENDED and access.can_submit(request.user, job.team_id)
    return render(request, "federation/index.html", {"clusters": clusters, "jobs": jobs})
