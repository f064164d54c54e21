"""Decayed usage through the database: recorded after each cycle, read back by the next snapshot, and
used to order queues (SCHEDULER_USAGE_HALF_LIFE_SECONDS, 7 days by default; 0 turns it off)."""
from datetime import timedelta

from django.utils import timezone

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


def _cluster():
    from gpuplatform import services
    from gpuplatform.models import Queue, Team

    services.load_cluster_spec(ClusterSpec(
        name="one", nodes=(NodeSpec(name="n1", flavor="H100", gpus=2),),
        queues=(QueueSpec(name="burner", team="burner", quotas={"H100": (0, 1, None)}),
                QueueSpec(name="fresh", team="fresh", quotas={"H100": (0, 1, None)}))))
    return {q.name: q for q in Queue.objects.all()}, {t.name: t for t in Team.objects.all()}


def _submit(queues, teams, name, queue, at):
    from gpuplatform import services

    return services.submit_job(command=SLEEP, team=teams[queue], queue=queues[queue], name=name, submitted_at=at,
                               roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 2}])


def test_yesterdays_heavy_user_yields_today(db, settings):
    from gpuplatform import services
    from gpuplatform.models import Queue
    from gpuplatform.scheduling.store import run_cycle_once

    settings.SCHEDULER_USAGE_HALF_LIFE_SECONDS = 6 * 3600
    queues, teams = _cluster()
    t0 = timezone.now()
    burn = _submit(queues, teams, "burn", "burner", t0)
    run_cycle_once(clock=t0)
    run_cycle_once(clock=t0 + timedelta(hours=12))  # 12 h at 2 GPUs
    burner = Queue.objects.get(name="burner")
    assert burner.recent_usage["H100"] > 1.4  # 2 * (1 - 2^-2) = 1.5
    services.finish_job(burn, at=t0 + timedelta(hours=12))
    later = t0 + timedelta(hours=12, minutes=1)
    _submit(queues, teams, "b2", "burner", later - timedelta(hours=11))  # older, same priority
    fresh = _submit(queues, teams, "f1", "fresh", later)
    run_cycle_once(clock=later)
    fresh.refresh_from_db()
    assert fresh.state == "running"


def test_on_by_default_with_a_seven_day_half_life():
    """Decayed usage is on unless turned off: 7 days, Slurm's PriorityDecayHalfLife default."""
    from django.conf import settings as live

    from gpuplatform.scheduling.usage_decay import default_config

    if "SCHEDULER_USAGE_HALF_LIFE_SECONDS" not in __import__("os").environ:
        assert live.SCHEDULER_USAGE_HALF_LIFE_SECONDS == 7 * 24 * 3600
    assert default_config().usage_half_life == live.SCHEDULER_USAGE_HALF_LIFE_SECONDS


def test_off_orders_by_current_usage(db, settings):
    from gpuplatform.models import Queue
    from gpuplatform.scheduling.store import run_cycle_once

    settings.SCHEDULER_USAGE_HALF_LIFE_SECONDS = None
    queues, teams = _cluster()
    _submit(queues, teams, "burn", "burner", timezone.now())
    run_cycle_once()
    assert Queue.objects.get(name="burner").recent_usage == {}


def test_a_queue_created_while_the_cluster_runs_ramps_up_from_zero(db, settings):
    """New-user trial 16, F11: a queue's first recorded usage was its whole usage at its first cycle, as if it had
    used that for ever (an inner queue created over root read 527 GPUs of history at once). It starts from 0 at the
    last cycle before it, and follows r * 2^(-dt/h) + usage * (1 - 2^(-dt/h)) from there."""
    from gpuplatform import services
    from gpuplatform.models import Queue, Team
    from gpuplatform.scheduling.store import run_cycle_once

    settings.SCHEDULER_USAGE_HALF_LIFE_SECONDS = 6 * 3600
    queues, teams = _cluster()
    t0 = timezone.now()
    run_cycle_once(clock=t0)  # the first cycle of all: every queue starts at its usage (none here)
    late = services.create_queue("late", team=Team.objects.get(name="fresh"), quotas={"H100": (0, 0, None)})
    services.submit_job(command=SLEEP, team=late.team, queue=late, name="l1", submitted_at=t0,
                        roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 2}])
    run_cycle_once(clock=t0 + timedelta(hours=6))  # starts it: 2 GPUs, folded in over the 6 h since the last cycle
    run_cycle_once(clock=t0 + timedelta(hours=12))
    late.refresh_from_db()
    # 0 at t0 and 2 GPUs as of each cycle since (the usage after its admissions): 2 * (1 - 2^-2) = 1.5 at +12 h;
    # started at its first cycle's usage it read 2.0 then and 2.0 now
    assert abs(late.recent_usage["H100"] - 1.5) < 1e-3, late.recent_usage
    assert not Queue.objects.get(name="burner").recent_usage.get("H100")
