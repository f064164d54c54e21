"""`manage.py demo --no-server --duration-seconds N` on a tiny cluster and trace: jobs pend, run and finish."""
from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from datetime import datetime, timedelta, timezone

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from clusterspec import importers
from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec, Trace, TraceJob
from gpuplatform.models import ClusterSample, Job, Membership, SchedulerCycle
from gpuplatform.trace_feeder import SimClock, TraceFeeder, trace_epoch

FLAVOR = "gpu"
REPO = Path(__file__).resolve().parents[2]


def tiny_cluster(**_opts) -> ClusterSpec:
    """Two 8-GPU nodes, each its own NVLink domain, under one leaf and one spine; two teams."""
    domains = (DomainSpec("spine", 3), DomainSpec("leaf-0", 2, "spine"),
               DomainSpec("nvl-a", 1, "leaf-0"), DomainSpec("nvl-b", 1, "leaf-0"))
    nodes = (NodeSpec("node-a", FLAVOR, 8, domain="nvl-a"), NodeSpec("node-b", FLAVOR, 8, domain="nvl-b"))
    queues = (QueueSpec("root", quotas={FLAVOR: (0, 16, 16)}),
              QueueSpec("red", "root", "red", quotas={FLAVOR: (0, 8, None)}),
              QueueSpec("blue", "root", "blue", quotas={FLAVOR: (0, 8, None)}))
    return ClusterSpec("tiny", nodes, domains, queues, ("a tiny test cluster",))


def tiny_trace(**_opts) -> Trace:
    """More demand than 16 GPUs at first (so some pend), short jobs that finish within minutes."""
    jobs = []
    for i in range(3):  # 3 x 6 GPUs for an hour: two run (one a node), one pends
        jobs.append(TraceJob(f"big{i}", "red" if i % 2 else "blue", submit=0.0, duration=3600.0,
                             tasks=1, gpus_per_task=6))
    for i in range(6):  # short one-GPU jobs, arriving over the first 10 minutes
        jobs.append(TraceJob(f"small{i}", "red" if i % 2 else "blue", submit=60.0 * i, duration=120.0,
                             tasks=1, gpus_per_task=1))
    return Trace("tiny", tuple(jobs), ("origin 2017-10-03 00:00:00",))


@pytest.fixture
def tiny_importers(monkeypatch):
    monkeypatch.setattr(importers, "load_cluster", lambda name, **o: tiny_cluster(**o), raising=False)
    monkeypatch.setattr(importers, "load_trace", lambda name, **o: tiny_trace(**o), raising=False)


def test_trace_epoch_from_notes_and_default():
    assert trace_epoch(tiny_trace()) == datetime(2017, 10, 3, tzinfo=timezone.utc)
    assert trace_epoch(Trace("x", ())).year == 2017


def test_sim_clock_runs_fast_and_caps_steps():
    walls = iter([0.0, 1.0, 101.0])
    clock = SimClock(datetime(2017, 1, 1, tzinfo=timezone.utc), speed=600, max_step=1800, wall=lambda: next(walls))
    assert clock.tick() - datetime(2017, 1, 1, tzinfo=timezone.utc) == timedelta(minutes=10)
    assert clock.tick() - datetime(2017, 1, 1, tzinfo=timezone.utc) == timedelta(minutes=40)  # capped at 30 min


@pytest.mark.django_db
def test_feeder_submits_on_the_simulated_clock_and_finishes_elapsed_jobs(tiny_importers):
    from gpuplatform import services
    from gpuplatform.scheduling.store import run_cycle_once

    services.load_cluster_spec(tiny_cluster())
    epoch = datetime(2017, 10, 3, tzinfo=timezone.utc)
    feeder = TraceFeeder(tiny_trace(), epoch=epoch)
    assert feeder.advance(epoch) == (0, 4)  # the three big jobs and small0 arrive at t = 0
    job = Job.objects.get(external_id="small0")
    assert job.submitted_at == epoch and job.duration_seconds == 120.0 and job.team.name == "blue"
    run_cycle_once(clock=epoch)
    assert Job.objects.get(external_id="small0").state == "running"
    assert Job.objects.filter(state="running").count() == 3
    assert Job.objects.filter(state="pending").count() == 1
    later = epoch + timedelta(minutes=5)
    finished, submitted = feeder.advance(later)
    assert finished == 1 and submitted == 5  # small0 ended at minute 2; small1..small5 arrive by minute 5
    done = Job.objects.get(external_id="small0")
    assert done.state == "succeeded" and done.finished_at == done.started_at + timedelta(seconds=120)


@pytest.mark.django_db
def test_demo_command_runs_the_replay(tiny_importers):
    out = io.StringIO()
    call_command("demo", "--no-server", "--duration-seconds", "4", "--start-day", "0", "--speed", "600",
                 "--tick", "0.2", "--password", "pw-demo-123", stdout=out)
    text = out.getvalue()
    assert "Log in as:" in text and "admin" in text and "pw-demo-123" in text
    assert "username = team name" in text
    User = get_user_model()
    assert User.objects.get(username="admin").is_staff
    assert Membership.objects.filter(user__username="red", team__name="red").exists()
    assert User.objects.get(username="blue").check_password("pw-demo-123")
    states = set(Job.objects.values_list("state", flat=True))
    assert {"running", "succeeded"} <= states, states
    assert SchedulerCycle.objects.count() >= 2  # the loop went round (4 s: fewer cycles on a loaded machine)
    assert ClusterSample.objects.exists()
    teams = set(Job.objects.filter(state="succeeded").values_list("team__name", flat=True))
    assert teams == {"red", "blue"}
    # a second run starts clean and reuses the loaded cluster and the users; a team created meanwhile gets no
    # login with the shared password, and an account the demo did not make keeps its own (new-user trial 3)
    from gpuplatform.models import Team

    Team.objects.create(name="green", slug="green")
    own = User.objects.create_user("blue2", password="own-secret-1")
    Team.objects.create(name="blue2", slug="blue2")
    call_command("demo", "--no-server", "--duration-seconds", "1", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-456", stdout=io.StringIO())
    assert not User.objects.filter(username="green").exists()
    own.refresh_from_db()
    assert own.check_password("own-secret-1") and not own.check_password("pw-demo-456")
    assert User.objects.get(username="blue").check_password("pw-demo-456")  # the demo's own login: reset
    assert Job.objects.filter(external_id="big0").count() == 1
    from gpuplatform.models import Event

    assert Event.objects.filter(kind="member_added").exists()  # the audit of set-up survives the reset


def test_busy_start_is_the_first_hour_the_running_jobs_fill_the_cluster():
    from gpuplatform.trace_feeder import busy_start_seconds

    trace = Trace("t", (
        TraceJob("a", "red", submit=100.0, duration=10_000.0, tasks=1, gpus_per_task=8),
        TraceJob("b", "red", submit=4000.0, duration=10_000.0, tasks=1, gpus_per_task=8),
    ))
    assert busy_start_seconds(trace, 16, fraction=0.5) == 3600.0
    assert busy_start_seconds(trace, 16, fraction=1.0) == 7200.0
    assert busy_start_seconds(trace, 64) is None


@pytest.mark.django_db
def test_warm_start_submits_the_running_jobs_with_their_remaining_time(tiny_importers):
    from gpuplatform import services

    services.load_cluster_spec(tiny_cluster())
    epoch = datetime(2017, 10, 3, tzinfo=timezone.utc)
    feeder = TraceFeeder(tiny_trace(), epoch=epoch, start_seconds=1800.0, warm_start=True)
    assert feeder.warm_jobs == 3 and feeder.start == epoch + timedelta(seconds=1800)
    feeder.advance(feeder.start)
    big = Job.objects.get(external_id="big0")
    assert big.submitted_at == epoch and big.duration_seconds == 1800.0  # 3600 s job, half done at the start
    assert not Job.objects.filter(external_id="small0").exists()  # ended before the start


def test_demo_help_lists_each_option_once():
    """`manage.py demo --help`: every option (--federation, --local-agents, ...) is described once in the
    options list, the usage line aside."""
    import re

    from gpuplatform.management.commands.demo import Command

    text = Command().create_parser("manage.py", "demo").format_help()
    options = text.split("\noptions:\n", 1)[1]
    described = re.findall(r"^  (--[a-z-]+)", options, re.M)
    assert "--federation" in described and "--local-agents" in described
    assert len(described) == len(set(described)), [o for o in described if described.count(o) > 1]
    assert options.count("docs/federation.md") == 1


@pytest.mark.parametrize("args, option", [
    (["--speed", "-5"], "--speed"), (["--speed", "0"], "--speed"), (["--speed", "nan"], "--speed"),
    (["--scale", "0"], "--scale"), (["--scale", "100"], "--scale"), (["--scale", "-1"], "--scale"),
    (["--cluster", "nosuch"], "--cluster"), (["--tick", "-1"], "--tick"),
    (["--duration-seconds", "-1"], "--duration-seconds"),
    # new-user trial 10, F22: --port 99999 ended in an OverflowError traceback from socket.bind
    (["--port", "99999"], "--port"), (["--port", "0"], "--port"), (["--port", "-1"], "--port"),
    (["--port", "http"], "--port"), (["--local-agents", "-2"], "--local-agents"),
    (["--gpus-per-agent", "0"], "--gpus-per-agent"), (["--gpus-per-agent", "65"], "--gpus-per-agent"),
    (["--federation", "-1"], "--federation"), (["--port", "65535", "--federation", "2"], "--federation"),
    # new-user trial 14, F1 / F21: day and second options are bounded (--start-day -1 ran from day 0, as
    # replay --start -1 is refused; --tick 1e300 overflowed a wait)
    (["--start-day", "-1"], "--start-day"), (["--start-day", "1e303"], "--start-day"),
    (["--start-day", "inf"], "--start-day"), (["--start-day", "nan"], "--start-day"),
    (["--tick", "1e300"], "--tick"), (["--duration-seconds", "1e300"], "--duration-seconds"),
    (["--compress", "0"], "--compress"), (["--compress", "-1"], "--compress"), (["--compress", "1e-300"], "--compress"),
    # new-user trial 15, F8: an empty --password was ignored and random passwords printed
    (["--password", ""], "--password: must not be empty"), (["--password", "  "], "--password: must not be empty"),
])
@pytest.mark.django_db
def test_demo_refuses_bad_options_before_doing_anything(args, option):
    """A bad --speed / --scale / --cluster is an argument error naming the option, before the banner and
    before any database work: no traceback (new-user trial 7, F14)."""
    from django.core.management.base import CommandError

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("demo", "--no-server", "--duration-seconds", "1", *args, stdout=out, stderr=err)
    assert option in str(caught.value)
    assert out.getvalue() == ""  # no banner, no "database migrated"


@pytest.mark.django_db
def test_demo_scale_is_the_philly_importers_only():
    from django.core.management.base import CommandError

    out = io.StringIO()
    with pytest.raises(CommandError, match="--scale"):
        call_command("demo", "--no-server", "--cluster", "openb", "--scale", "0.5", stdout=out)
    assert out.getvalue() == ""


@pytest.mark.django_db
def test_demo_warns_that_scale_and_cluster_do_not_apply_to_a_loaded_cluster(tiny_importers):
    call_command("demo", "--no-server", "--duration-seconds", "0.5", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-123", stdout=io.StringIO())
    out, err = io.StringIO(), io.StringIO()
    call_command("demo", "--no-server", "--duration-seconds", "0.5", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-123", "--scale", "0.5", "--cluster", "philly", stdout=out, stderr=err)
    text = out.getvalue() + err.getvalue()
    assert "--scale" in text and "--cluster" in text and "already loaded" in text
    assert "start fresh" in text
    out, err = io.StringIO(), io.StringIO()
    call_command("demo", "--no-server", "--duration-seconds", "0.5", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-123", stdout=out, stderr=err)
    assert "not apply" not in out.getvalue() + err.getvalue()  # no option given: nothing to warn about


@pytest.mark.django_db(transaction=True)
def test_demo_set_up_events_are_on_the_cluster_clock_below_the_replays(tiny_importers):
    """New-user trial 8, F4: the set-up's events (team_created, member_added, queue_created) were stamped at
    wall time, years after the replay's simulated time, so they stayed at the top of the newest-first events
    list. They are at the trace's t = 0 now, before every replayed job's events."""
    from gpuplatform.models import Event

    call_command("demo", "--no-server", "--duration-seconds", "2", "--start-day", "0", "--speed", "600",
                 "--tick", "0.2", "--password", "pw-demo-123", stdout=io.StringIO())
    setup = Event.objects.filter(kind__in=("team_created", "member_added", "queue_created"))
    assert setup.exists()
    epoch = datetime(2017, 10, 3, tzinfo=timezone.utc)
    assert set(setup.values_list("time", flat=True)) == {epoch}
    newest = Event.objects.order_by("-time", "-id").first()
    assert newest.kind not in ("team_created", "member_added", "queue_created") and newest.time >= epoch


@pytest.mark.parametrize("args, option", [
    (["--interval", "nan"], "--interval"), (["--interval", "0"], "--interval"), (["--poll", "-1"], "--poll"),
    (["--telemetry-seconds", "-5"], "--telemetry-seconds"), (["--gpus", "0"], "--gpus"), (["--gpus", "two"], "--gpus"),
])
def test_gpu_agent_refuses_bad_numbers_naming_the_option(args, option):
    """New-user trial 10, F22 (the same kind as `demo --port 99999`): the agent's numeric options are checked by
    argparse, naming the option; --interval nan passed the old `<= 0` check and --telemetry-seconds -5 was taken."""
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as caught:
        call_command("gpu_agent", "--api", "http://127.0.0.1:1", "--token", "x", "--once", *args,
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert option in str(caught.value) and ("must be" in str(caught.value) or "not a whole number" in str(caught.value))


@pytest.mark.parametrize("command, args, option", [
    ("slurm_backend", ["--once", "--poll", "-1"], "--poll"), ("slurm_backend", ["--once", "--poll", "0"], "--poll"),
    ("import_topology", ["x.yaml", "--format", "kueue", "--lowest-tier", "-1"], "--lowest-tier"),
    ("import_topology", ["x.yaml", "--format", "kueue", "--lowest-tier", "0"], "--lowest-tier"),
    ("import_topology", ["x.yaml", "--format", "kueue", "--lowest-tier", "40000"], "--lowest-tier"),  # review 11 R9
])
def test_other_commands_refuse_bad_numbers_naming_the_option(command, args, option):
    """F22's kind in the other commands: `slurm_backend --poll -1` ran a round and then died in time.sleep(-1)
    (--poll 0 fell back to the setting silently), `import_topology --lowest-tier -1` built tier -1 domains."""
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as caught:
        call_command(command, *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert option in str(caught.value) and "must be" in str(caught.value)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.django_db
def test_a_second_demo_on_a_busy_port_refuses_before_clearing_anything(tiny_importers):
    """New-user trial 11, F1: `make demo` run again while a demo served on the port printed "previous demo
    workload cleared (4228 jobs)" (the running demo lost every job) and only then failed with "Address already
    in use". The port is bound before the database is touched; the refusal says a demo runs there. The local
    and Slurm modes check it (and their other refusals) before clearing too."""
    import socket

    from django.core.management.base import CommandError

    call_command("demo", "--no-server", "--duration-seconds", "1", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-123", stdout=io.StringIO())
    jobs = Job.objects.count()
    assert jobs
    with socket.socket() as busy:  # the running demo's listening socket
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for extra in ([], ["--keep"], ["--local-agents", "1"]):
            out = io.StringIO()
            with pytest.raises(CommandError) as caught:
                call_command("demo", "--port", str(port), "--duration-seconds", "1", "--start-day", "0",
                             "--password", "pw-demo-123", *extra, stdout=out, stderr=io.StringIO())
            assert "already runs there" in str(caught.value) and "Nothing was changed" in str(caught.value)
            assert "cleared" not in out.getvalue() and "migrated" not in out.getvalue()
            assert Job.objects.count() == jobs
    # local mode on this (simulated) cluster's database refuses before clearing as well
    with pytest.raises(CommandError, match="other nodes"):
        call_command("demo", "--local-agents", "1", "--port", str(_free_port()), "--duration-seconds", "1",
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert Job.objects.count() == jobs
    # and a replay day past the trace is refused before the reset
    with pytest.raises(CommandError, match="no job after replay day"):
        call_command("demo", "--no-server", "--start-day", "400", "--duration-seconds", "1",
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert Job.objects.count() == jobs


def test_a_database_hold_refuses_a_second_holder_until_released(tmp_path):
    """demo.DatabaseHold on a SQLite file (a flock beside it, naming its holder): a second hold refuses, naming the
    first; once released, the database can be held again. A database in memory is held by nobody."""
    from django.core.management.base import CommandError

    from gpuplatform.management.commands.demo import DatabaseHold

    name = str(tmp_path / "db.sqlite3")
    first = DatabaseHold(8123, vendor="sqlite", name=name).acquire()
    with pytest.raises(CommandError) as caught:
        DatabaseHold(8124, vendor="sqlite", name=name).acquire()
    assert "another demo runs on this database" in str(caught.value) and "port 8123" in str(caught.value)
    assert "Nothing was changed" in str(caught.value)
    first.release()
    DatabaseHold(None, vendor="sqlite", name=name).acquire().release()
    for memory in (":memory:", "file:memorydb_default?mode=memory&cache=shared"):
        DatabaseHold(1, vendor="sqlite", name=memory).acquire()
        DatabaseHold(2, vendor="sqlite", name=memory).acquire()  # nothing held: no refusal


@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "inf"])
@pytest.mark.django_db
def test_demo_start_day_follows_replays_start_rule_and_message(value):
    """New-user trial 14, F21: `demo --start-day -1` ran from day 0 while `replay --start -1` is refused: one rule
    (a finite number, zero or more) and one message for both."""
    from django.core.management.base import CommandError

    said = []
    for command, option in (("demo", "--start-day"), ("replay", "--start")):
        extra = ["--no-server", "--duration-seconds", "1"] if command == "demo" else ["--cluster", "philly", "--trace", "philly"]
        with pytest.raises(CommandError) as caught:
            call_command(command, *extra, option, value, stdout=io.StringIO(), stderr=io.StringIO())
        assert option in str(caught.value)
        said.append(str(caught.value).split(option)[-1].lstrip(": "))
    assert said[0] == said[1] == f"must be a finite number zero or more, got {value}", said


def test_the_refusals_name_the_variable_that_picks_the_demos_database(tmp_path, monkeypatch):
    """New-user trial 14, F9: under make the refusals said "give this one its own database (DATABASE_URL=...)",
    but every make demo target sets DATABASE_URL itself from DEMO_DB / DEMO_LOCAL_DB / ...: following the advice
    was refused again. Each target names its variable (DEMO_DB_VARIABLE) and the messages and README use it;
    `manage.py demo` itself still reads DATABASE_URL."""
    import re

    from django.core.management.base import CommandError

    from gpuplatform.management.commands.demo import DatabaseHold, listen_or_refuse

    makefile = (REPO / "Makefile").read_text()
    targets = re.findall(r"DATABASE_URL='\$\((\w+)\)'(.*)manage\.py demo", makefile)
    assert len(targets) == 4 and all(f"DEMO_DB_VARIABLE={var} " in rest for var, rest in targets), targets
    name = str(tmp_path / "db.sqlite3")
    first = DatabaseHold(8123, vendor="sqlite", name=name).acquire()
    try:
        for variable, said in (("DEMO_DB", "DEMO_DB=sqlite:///"), ("DEMO_LOCAL_DB", "DEMO_LOCAL_DB=sqlite:///"),
                               (None, "DATABASE_URL=sqlite:///")):
            if variable:
                monkeypatch.setenv("DEMO_DB_VARIABLE", variable)
            else:
                monkeypatch.delenv("DEMO_DB_VARIABLE", raising=False)
            with pytest.raises(CommandError) as caught:
                DatabaseHold(8124, vendor="sqlite", name=name).acquire()
            assert said in str(caught.value), str(caught.value)
            busy = listen_or_refuse("127.0.0.1", 0)
            try:
                with pytest.raises(CommandError) as caught:
                    listen_or_refuse("127.0.0.1", busy.server_address[1])
                assert f"another {variable or 'DATABASE_URL'} " in str(caught.value), str(caught.value)
            finally:
                busy.server_close()
    finally:
        first.release()
    readme = (REPO / "README.md").read_text()
    assert "its own `DATABASE_URL`" not in readme and "DEMO_DB=sqlite:///" in readme


@pytest.mark.django_db(transaction=True)
def test_a_second_demo_on_the_same_database_refuses_before_clearing_anything(tiny_importers, tmp_path, monkeypatch):
    """A second `make demo` on another port but the same database cleared the running demo's workload (README
    said so: "give it its own DATABASE_URL"), and both then ran a scheduling loop on it. While a demo runs it
    holds its database (DatabaseHold: a flock beside the SQLite file, an advisory lock on PostgreSQL); another demo,
    in any mode, with or without --keep, refuses before it migrates, clears or changes anything, naming the holder.
    On PostgreSQL (CI) the tests' own database is held; on SQLite the tests' database is in memory, which no other
    process can open, so the hold is taken on a file in tmp_path as on db.sqlite3."""
    from django.core.management.base import CommandError
    from django.db import connection

    from gpuplatform.management.commands import demo

    if connection.vendor == "sqlite":
        monkeypatch.setattr(demo, "demo_database", lambda: {"vendor": "sqlite", "name": str(tmp_path / "db.sqlite3")})
    call_command("demo", "--no-server", "--duration-seconds", "1", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-123", stdout=io.StringIO())
    jobs = Job.objects.count()
    assert jobs
    running = demo.DatabaseHold(8123, **demo.demo_database()).acquire()  # the first demo, still running
    try:
        for extra in (["--no-server"], ["--no-server", "--keep"], ["--port", str(_free_port())],
                      ["--local-agents", "1", "--port", str(_free_port())],
                      ["--federation", "1", "--port", str(_free_port())]):  # review 13, R6: the manager's too
            out = io.StringIO()
            with pytest.raises(CommandError) as caught:
                call_command("demo", "--duration-seconds", "1", "--start-day", "0", "--password", "pw-demo-123",
                             *extra, stdout=out, stderr=io.StringIO())
            assert "another demo runs on this database" in str(caught.value), extra
            assert "Nothing was changed" in str(caught.value) and "port 8123" in str(caught.value)
            assert "cleared" not in out.getvalue() and "migrated" not in out.getvalue()
            assert Job.objects.count() == jobs
    finally:
        running.release()
    # once the first demo has stopped, the database is free again; the demo gives its hold back when it ends
    for _ in range(2):
        call_command("demo", "--no-server", "--duration-seconds", "1", "--start-day", "0", "--tick", "0.2",
                     "--password", "pw-demo-123", stdout=io.StringIO())


@pytest.mark.django_db
def test_keep_continues_the_kept_workload_instead_of_replaying_it_again(tiny_importers):
    """New-user trial 11, F4: `make demo --keep` replayed the trace again on top of the kept jobs: the warm start
    and arrivals came in a second time (trace jobs live twice) and the clock went back to the start, so the
    previous run's samples stayed the newest. With --keep the clock goes on from the kept workload's and no
    trace job is submitted twice."""
    from django.db.models import Count, Max

    call_command("demo", "--no-server", "--duration-seconds", "1.5", "--start-day", "0", "--speed", "600",
                 "--tick", "0.2", "--password", "pw-demo-123", stdout=io.StringIO())
    kept = set(Job.objects.values_list("pk", flat=True))
    stopped = SchedulerCycle.objects.aggregate(t=Max("clock"))["t"]
    assert kept and stopped
    out, err = io.StringIO(), io.StringIO()
    call_command("demo", "--no-server", "--keep", "--duration-seconds", "1.5", "--start-day", "0", "--speed", "600",
                 "--tick", "0.2", "--password", "pw-demo-123", stdout=out, stderr=err)
    assert "continuing the kept workload" in out.getvalue()
    assert "--start-day does not apply with --keep" in err.getvalue()
    assert kept <= set(Job.objects.values_list("pk", flat=True))  # the kept jobs stay
    twice = list(Job.objects.values("external_id").annotate(n=Count("id")).filter(n__gt=1))
    assert twice == []  # no trace job submitted again
    new_cycles = SchedulerCycle.objects.filter(clock__gt=stopped)
    assert new_cycles.exists()
    assert not SchedulerCycle.objects.filter(number__gt=max(new_cycles.values_list("number", flat=True)),
                                             clock__lt=stopped).exists()
    assert SchedulerCycle.objects.order_by("-number").first().clock >= stopped  # the clock did not go back


@pytest.mark.django_db(transaction=True)
def test_the_demo_returns_only_once_its_last_forecast_has_ended(tiny_importers, settings, monkeypatch):
    """The CI run at 22c0f34 lost the teardown of the test above (Django's flush, a TRUNCATE) while a forecast
    thread, started by the demo's last cycles, still ran after the demo had returned; another test's thread
    was stopped at "Database access not allowed" the same way. A demo (any loop) that stops waits for its
    forecast: nothing of it writes after it has returned."""
    from gpuplatform.scheduling import forecast as store_forecast
    from gpuplatform.scheduling import tasks

    settings.FORECAST_SECONDS = 1
    began, ended = threading.Event(), threading.Event()

    def slow_forecast(clock):
        began.set()
        time.sleep(2.0)  # longer than the demo's 1 s
        ended.set()

    monkeypatch.setattr(store_forecast, "run_forecast_once", slow_forecast)
    monkeypatch.setattr(tasks, "_forecast_thread", [None])
    monkeypatch.setattr(tasks, "_last_forecast_clock", [None])
    monkeypatch.setattr(tasks, "_forecast_wall", [0.0, 0.0])
    call_command("demo", "--no-server", "--duration-seconds", "1", "--start-day", "0", "--tick", "0.2",
                 "--password", "pw-demo-123", stdout=io.StringIO())
    assert began.is_set()  # a forecast ran
    assert ended.is_set()  # and had ended when the demo returned
    assert not tasks._forecast_thread[0].is_alive()

    stop = threading.Event()
    began.clear()
    ended.clear()
    loop = threading.Thread(target=tasks.run_loop, kwargs={"interval_seconds": 0.1, "clock_fn": lambda: datetime.now(timezone.utc),
                                                         "stop_event": stop, "forecast": True})
    loop.start()
    assert began.wait(10)
    stop.set()
    loop.join(10)
    assert not loop.is_alive() and ended.is_set()  # run_loop, too, returns after its forecast
