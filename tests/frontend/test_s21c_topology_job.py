"""Trial 21, F15: topology.json?job=<id> for a pending job that holds GPUs (a reservation, an eviction's hold) shows
the GPUs held for it, as held, with the job named; ?team= counts them for the job's team too."""
from __future__ import annotations

from rest_framework.test import APIClient


def test_a_pending_holders_filter_shows_its_held_gpus(held_world):
    from gpuplatform.models import Job

    big = Job.objects.get(name="big")
    assert big.state == "pending" and big.reservation_start is not None  # the backfill (EASY) reservation
    client = APIClient()
    client.force_login(held_world)
    topo = client.get(f"/topology.json?job={big.pk}").json()
    assert topo["shown_gpus"] == 2 and topo["totals"]["held"] == 2, topo["totals"]  # was 0
    assert [r["job"] for r in topo["rows"]].count("big") == 2  # per GPU: nodes without a domain (trial 23)
    runner = Job.objects.get(name="r6")
    other = client.get(f"/topology.json?job={runner.pk}").json()
    assert other["totals"]["held"] == 0 and other["totals"]["running"] + other["totals"]["borrowed"] == 6
    team = client.get("/topology.json?team=alpha").json()
    assert team["totals"]["held"] == 2 and team["shown_gpus"] == 8
    zoomed = client.get(f"/topology.json?zoom=node:n1&job={big.pk}").json()
    held = [r for r in zoomed["rows"] if r["state"] == "held"]
    assert len(held) == 2 and all(r["job"] == "big" for r in held), zoomed["rows"]
    cell = next(t for t in zoomed["figure"]["data"] if t["name"].startswith("held"))
    assert all("held (reserved) for a job that has not started: big · team alpha" in h for h in cell["hovertext"])


def test_a_nominated_holders_gpus_are_named_by_its_reserved_tasks(held_world):
    """A hold written as the holder's Job.reserved (a drain reservation, an eviction's beneficiary) names its job
    the same way; GPUs held for no job the database can name stay held, in no job's filter."""
    from gpuplatform.models import ClusterSample, Job

    big = Job.objects.get(name="big")
    sample = ClusterSample.objects.order_by("-time", "-id").first()
    held = sample.held_at["n1"]
    Job.objects.filter(pk=big.pk).update(reserved=[["main", 0, "n1", held]], reservation_start=None)
    client = APIClient()
    client.force_login(held_world)
    assert client.get(f"/topology.json?job={big.pk}").json()["totals"]["held"] == 2
    Job.objects.filter(pk=big.pk).update(reserved=None)
    assert client.get(f"/topology.json?job={big.pk}").json()["totals"]["held"] == 0
    assert client.get("/topology.json").json()["totals"]["held"] == 2
