"""The manager's round against fake members (tests/federation/conftest.py): one copy per job, always."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuplatform.federation import dispatch, manager
from gpuplatform.models import Event, FederatedJob, MemberCluster, Team

from tests.federation.fakes import summary

pytestmark = pytest.mark.django_db

BODY = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
        "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}]}


def submit(users, **extra):
    return manager.submit_federated_job(team=Team.objects.get(name="alpha"), body={**BODY, **extra},
                                        submitter=users["member"])


def fresh(job):
    job.refresh_from_db()
    return job


def test_dispatches_once_to_the_cluster_that_starts_it_soonest(users, members, factory, settings):
    settings.FEDERATION_USE_WHATIF = False
    members["east"].state = summary(free=0, pending_gpus=32)
    job = submit(users)
    out = dispatch.run_round(client_for=factory)
    job = fresh(job)
    assert out["dispatched"] == 1 and job.state == "dispatched" and job.cluster.name == "west"
    assert members["west"].creates == 1 and members["east"].creates == 0
    copy = next(iter(members["west"].jobs.values()))
    assert copy["external_id"] == f"fed:{job.pk}:g0" and copy["body"]["roles"] == BODY["roles"]
    scores = {c["cluster"]: c for c in job.decision["candidates"]}
    assert scores["west"]["wait_s"] == 0 and scores["east"]["wait_s"] > 0
    dispatch.run_round(client_for=factory)  # a second round creates nothing more
    assert members["west"].creates == 1 and fresh(job).state == "dispatched"


def test_the_forecast_estimate_decides(users, members, factory, settings):
    settings.FEDERATION_USE_WHATIF = True
    members["east"].estimates, members["west"].estimates = 0.0, 5400.0
    job = submit(users)
    dispatch.run_round(client_for=factory)
    job = fresh(job)
    assert job.cluster.name == "east" and job.decision["candidates"][0]["forecast"] is True


def test_clusters_and_selector_are_honoured(users, members, factory):
    members["east"].state = summary(free=0, pending_gpus=32)
    job = submit(users, clusters=["east"])
    other = submit(users, cluster_selector={"region": "east"})
    dispatch.run_round(client_for=factory)
    assert fresh(job).cluster.name == "east" and fresh(other).cluster.name == "east"
    assert fresh(job).decision["rejected"] == {"west": "not in the job's clusters"}


def test_manager_crash_mid_dispatch_leaves_one_copy(users, members, factory):
    members["east"].state = summary(free=0, pending_gpus=32)
    members["west"].lose_next_answer = True  # the create happens; its answer never arrives
    job = submit(users)
    dispatch.run_round(client_for=factory)
    job = fresh(job)
    assert job.state == "dispatching" and job.remote_id is None and members["west"].creates == 1
    dispatch.dispatch_pending(client_for=factory)  # the restarted manager re-sends with the same key
    job = fresh(job)
    assert job.state == "dispatched" and job.remote_id == next(iter(members["west"].jobs))
    assert members["west"].creates == 1 and len(members["west"].jobs) == 1 and not members["east"].jobs


def test_lost_worker_jobs_move_and_its_stale_copies_are_stopped_on_return(users, members, factory, settings):
    settings.WORKER_LOST_SECONDS = 900
    members["east"].state = summary(free=0, pending_gpus=32)
    pending_job = submit(users, name="p")
    running_job = submit(users, name="r", restartable=True)
    pinned_job = submit(users, name="n")  # running, not restartable: never moved
    dispatch.run_round(client_for=factory)
    west = members["west"]
    assert all(fresh(j).cluster.name == "west" for j in (pending_job, running_job, pinned_job))
    for jid, j in west.jobs.items():
        if j["external_id"].startswith((f"fed:{running_job.pk}:", f"fed:{pinned_job.pk}:")):
            j["state"] = "running"
    dispatch.run_round(client_for=factory)
    assert fresh(running_job).state == "running" and fresh(pinned_job).state == "running"

    west.reachable = False
    t0 = timezone.now()
    dispatch.run_round(client_for=factory, now=t0)
    assert MemberCluster.objects.get(name="west").state == "unreachable" and fresh(pending_job).cluster.name == "west"
    members["east"].state = summary()  # east has room now
    dispatch.run_round(client_for=factory, now=t0 + timedelta(seconds=901))
    assert MemberCluster.objects.get(name="west").state == "lost"
    for j in (pending_job, running_job):
        j = fresh(j)
        assert j.cluster.name == "east" and j.generation == 1 and j.state == "dispatched"
        assert j.placements[0]["fenced"] is True
    pinned = fresh(pinned_job)
    assert pinned.state == "lost" and pinned.cluster.name == "west" and pinned.generation == 0
    assert len(members["east"].live()) == 2

    members["east"].start_all()
    west.reachable = True  # the lost worker returns, still running/holding its old copies
    dispatch.run_round(client_for=factory, now=t0 + timedelta(seconds=1000))
    assert MemberCluster.objects.get(name="west").state == "healthy"
    live_west = {j["external_id"] for j in west.live()}
    assert live_west == {f"fed:{pinned_job.pk}:g0"}  # the moved jobs' copies were stopped (fencing)
    assert fresh(pinned_job).state == "running"
    # no job runs twice: count running copies per manager job across both members
    running = [j["external_id"].split(":")[1] for m in members.values() for j in m.running()]
    assert sorted(running) == sorted({*running}) and len(running) == 3
    assert Event.objects.filter(kind="federation.fenced").count() == 2


def test_withdraw_when_another_cluster_would_start_it_sooner(users, members, factory, settings):
    settings.DISPATCH_TIMEOUT = 600
    settings.FEDERATION_USE_WHATIF = False
    members["east"].state = summary(free=0, pending_gpus=32)
    members["west"].state = summary(free=0, pending_gpus=64)
    job = submit(users)
    dispatch.run_round(client_for=factory)
    first = fresh(job).cluster.name
    assert first == "east"
    t0 = fresh(job).dispatched_at
    members["west"].state = summary()  # west empties; east stays full
    dispatch.run_round(client_for=factory, now=t0 + timedelta(seconds=300))
    assert fresh(job).cluster.name == "east"  # not before DISPATCH_TIMEOUT
    dispatch.run_round(client_for=factory, now=t0 + timedelta(seconds=700))
    job = fresh(job)
    assert job.cluster.name == "west" and job.generation == 1
    assert [j["state"] for j in members["east"].jobs.values()] == ["cancelled"]
    assert len(members["west"].live()) == 1


def test_a_started_copy_is_never_withdrawn(users, members, factory, settings):
    settings.DISPATCH_TIMEOUT = 600
    members["east"].state = summary(free=0, pending_gpus=32)
    members["west"].state = summary(free=0, pending_gpus=64)
    job = submit(users)
    dispatch.run_round(client_for=factory)
    members["west"].state = summary()
    members["east"].start_all()  # it started on east after the sync: withdraw must be refused there
    n = dispatch.withdraw_stale(client_for=factory, now=fresh(job).dispatched_at + timedelta(seconds=700))
    assert n == 0 and fresh(job).cluster.name == "east" and not members["west"].jobs


def test_federation_quota_holds_jobs_at_the_manager(users, members, factory):
    jobs = [submit(users, name=f"j{i}", roles=[{"name": "w", "tasks": 2, "gpus_per_task": 8}]) for i in range(3)]
    out = dispatch.run_round(client_for=factory)  # alpha's manager quota: limit 32 GPUs in flight
    assert out["dispatched"] == 2 and out["waiting"] == 1
    waiting = fresh(jobs[2])
    assert waiting.state == "pending" and "federation quota: 32 of 32" in waiting.reason


def test_cancel_at_the_manager_stops_the_copy(users, members, factory):
    job = submit(users)
    dispatch.run_round(client_for=factory)
    where = members[fresh(job).cluster.name]
    where.start_all()
    manager.cancel_federated_job(fresh(job), actor=users["member"], client_for=factory)
    assert fresh(job).state == "cancelled" and not where.live()


def test_cancel_while_the_worker_is_down_fences_the_copy(users, members, factory):
    job = submit(users)
    dispatch.run_round(client_for=factory)
    where = members[fresh(job).cluster.name]
    where.reachable = False
    manager.cancel_federated_job(fresh(job), actor=users["member"], client_for=factory)
    assert fresh(job).state == "cancelled" and where.live()
    where.reachable = True
    dispatch.run_round(client_for=factory)
    assert not where.live()


def test_nothing_fits_says_why(users, members, factory):
    job = submit(users, roles=[{"name": "w", "tasks": 1, "gpus_per_task": 16}])
    dispatch.run_round(client_for=factory)
    job = fresh(job)
    assert job.state == "pending" and "fits no node" in job.reason and not members["east"].jobs


def test_refused_by_a_member_goes_elsewhere(users, members, factory):
    from gpuplatform.federation.client import MemberRefused

    def refuse(body, key):
        raise MemberRefused(400, {"queue": ["closed"]})

    members["west"].submit = refuse
    members["east"].state = summary(free=0, pending_gpus=32)
    job = submit(users)
    dispatch.run_round(client_for=factory)
    assert fresh(job).state == "pending" and "west refused" in fresh(job).reason
    dispatch.run_round(client_for=factory)
    assert fresh(job).cluster.name == "east" and len(members["east"].jobs) == 1


def test_forecasts_are_cached_per_member_shape_and_queue_within_a_round(users, members, factory, settings):
    settings.FEDERATION_USE_WHATIF, settings.FEDERATION_FORECAST_PROBES = True, 64
    members["east"].estimates, members["west"].estimates = 0.0, 5400.0
    jobs = [submit(users, name=f"j{i}") for i in range(4)]  # 4 x 8 GPUs: queue alpha's federation quota
    out = dispatch.run_round(client_for=factory)
    assert out["dispatched"] == 4 and all(fresh(j).cluster.name == "east" for j in jobs)
    # east is asked again after each dispatch there (its queue changed); west's one answer serves all four
    assert (members["east"].estimate_calls, members["west"].estimate_calls) == (4, 1)
    assert (out["forecast_probes"], out["forecast_hits"], out["forecast_over_cap"]) == (5, 3, 0)
    assert all(fresh(j).decision["candidates"][0]["forecast"] is True for j in jobs)
    FederatedJob.objects.filter(pk=jobs[0].pk).update(state="succeeded")  # frees 8 GPUs of the quota
    nxt = submit(users, name="next")
    out = dispatch.run_round(client_for=factory)  # a new round: nothing cached from the last one
    assert fresh(nxt).state == "dispatched" and out["forecast_probes"] == 2


def test_forecast_probes_per_round_are_capped(users, members, factory, settings):
    settings.FEDERATION_USE_WHATIF, settings.FEDERATION_FORECAST_PROBES = True, 3
    members["east"].estimates, members["west"].estimates = 0.0, 5400.0
    jobs = [submit(users, name=f"j{i}") for i in range(4)]
    out = dispatch.run_round(client_for=factory)
    assert members["east"].estimate_calls + members["west"].estimate_calls == out["forecast_probes"] == 3
    assert out["dispatched"] == 4 and out["forecast_over_cap"] == 2
    used = [all(c["forecast"] for c in fresh(j).decision["candidates"]) for j in jobs]
    # jobs 1-2 forecast (2 probes, then 1 re-probe of east); past the cap every candidate is scored by the
    # backlog rule, none with a stale mix of forecasts
    assert used == [True, True, False, False]
    assert not any(c["forecast"] for j in jobs[2:] for c in fresh(j).decision["candidates"])


def test_forecast_cache_keys_and_unanswering_members(settings):
    from gpuplatform.federation.client import MemberUnreachable

    cache = dispatch.ForecastCache(cap=10)
    calls = []

    def probe(member):
        calls.append(member)
        if member == "down":
            raise MemberUnreachable("no answer")
        return 60.0

    a = {"queue": "alpha", "tasks": 1, "gpus_per_task": 8, "priority": 0}
    assert cache.estimates(a, ["east", "down"], probe) == {"east": 60.0}
    assert cache.estimates(dict(a), ["east", "down"], probe) == {"east": 60.0}  # both cached, the failure too
    assert calls == ["east", "down"]
    cache.estimates({**a, "queue": "beta"}, ["east"], probe)  # another queue: another key
    cache.estimates({**a, "gpus_per_task": 4}, ["east"], probe)  # another shape: another key
    assert calls == ["east", "down", "east", "east"] and cache.counts()["forecast_hits"] == 2
    cache.forget("east")
    cache.estimates(a, ["east"], probe)
    assert calls[-1] == "east" and cache.probes == 5


def test_a_worker_that_refuses_the_managers_token_reads_refused_not_unreachable(users, members, factory):
    """Trial 16, F6 (part): a member whose token at the worker was wrong read `unreachable`, as if the network were
    down; only its last_error said HTTP 401. It reads `refused`, its last_error says to set a valid token, nothing
    is dispatched to it, and it is healthy again at the first sync after the token is right."""
    members["west"].token_refused = True
    job = submit(users)
    dispatch.run_round(client_for=factory)
    west = MemberCluster.objects.get(name="west")
    assert west.state == "refused" and "HTTP 401" in west.last_error
    assert "refuses the manager's token" in west.last_error and f"/api/v1/federation/clusters/{west.pk}/" in west.last_error
    assert fresh(job).cluster.name == "east" and not members["west"].jobs
    members["west"].reachable = False  # then the network goes too: unreachable, as before
    dispatch.run_round(client_for=factory)
    assert MemberCluster.objects.get(name="west").state == "unreachable"
    members["west"].reachable, members["west"].token_refused = True, False
    dispatch.run_round(client_for=factory)
    west = MemberCluster.objects.get(name="west")
    assert west.state == "healthy" and west.last_error == ""
