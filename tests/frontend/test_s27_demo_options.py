"""New-user trial 27, `make demo` / `make demo-local`:

1. --local-agents had no upper bound (LOCAL_AGENTS=100000 tried 100,000 agent processes): 1 to MAX_LOCAL_AGENTS (64),
   refused in the words of the other options' refusals;
2. the printed token line put the password in the shell bare (DEMO_PASSWORD='p w;echo INJECTED' ran `echo INJECTED`
   when pasted): it is shell-quoted and form-encoded by curl now, as the submit lines' queue and command are;
3. a restart without --keep left the earlier runs' other events (node cordoned, quota changed ...) at cluster times
   later than the new run's clock, above its events in the newest-first list: they are cleared with the workload;
4. the clearing line did not say that jobs submitted by hand go too: it says so;
5. `--local-agents 0` quietly ran the trace replay (and loaded its simulated cluster into db-local.sqlite3): refused,
   the option selects local mode; left out, the trace replay runs."""
from __future__ import annotations

import io
import re
import shlex
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from gpuplatform.management.commands import demo as demo_cmd
from tests.frontend.test_demo import tiny_importers  # noqa: F401  (fixture)
from tests.platform.test_s22p_demo_token_line import _bash, needs_curl

EPOCH = datetime(2017, 10, 3, tzinfo=timezone.utc)  # tiny_trace's t = 0
RUN = ("demo", "--no-server", "--duration-seconds", "0.5", "--start-day", "0", "--tick", "0.2",
       "--password", "pw-demo-123")


# -- 1 and 5: --local-agents is 1 to 64 ----------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("value", ["65", "100000", "0", "-2"])
def test_local_agents_out_of_1_to_64_is_refused_naming_the_option_and_the_rule(value, monkeypatch):
    import gpuplatform.agent.local as agent_local

    def no_start(*a, **k):
        raise AssertionError("no agent may start")

    monkeypatch.setattr(agent_local, "start_agents", no_start)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("demo", "--local-agents", value, "--duration-seconds", "1", stdout=out, stderr=err)
    message = str(caught.value)
    assert f"argument --local-agents: must be from 1 to {demo_cmd.MAX_LOCAL_AGENTS}, got {value}" in message, message
    assert "leave --local-agents out for the trace replay" in message  # what 0 would have meant, and how to get it
    assert out.getvalue() == ""  # refused before the database, the port or any agent


def test_the_bound_is_64_and_the_help_and_readme_say_it():
    from django.conf import settings
    from pathlib import Path

    assert demo_cmd.MAX_LOCAL_AGENTS == 64
    parser = demo_cmd.Command().create_parser("manage.py", "demo")
    assert parser.parse_args(["--local-agents", "64"]).local_agents == 64
    assert parser.parse_args(["--local-agents", "1"]).local_agents == 1
    assert parser.parse_args([]).local_agents == 0  # left out: the trace replay
    help_text = " ".join(parser.format_help().split())
    assert "1 to 64" in help_text and "Left out: the trace replay" in help_text
    readme = " ".join((Path(settings.BASE_DIR) / "README.md").read_text().split())
    assert "`LOCAL_AGENTS=2`, 1 to 64" in readme and "`--local-agents 0` is refused" in readme


@pytest.mark.django_db
def test_call_command_keywords_skip_the_parser_and_meet_the_same_bound():
    with pytest.raises(CommandError, match=r"--local-agents must be from 1 to 64 .* got --local-agents 65"):
        call_command("demo", local_agents=65, no_server=True, duration_seconds=1, stdout=io.StringIO())


# -- 2: every line to paste is shell-quoted -----------------------------------------------------------------------

HOSTILE = "p w;echo INJECTED $(echo SUBST) `echo TICK` it's \"q\" &x=%41+"


def test_the_token_line_quotes_the_password_for_the_shell():
    line = demo_cmd.token_line("http://127.0.0.1:8000", HOSTILE)
    inner = line.split("$(", 1)[1].split(" | ", 1)[0]  # the curl command of the line
    assert shlex.split(inner) == ["curl", "-s", "-X", "POST", "http://127.0.0.1:8000/api/v1/auth-token/", "-d",
                                  "username=demo", "--data-urlencode", f"password={HOSTILE}"]


@needs_curl
@pytest.mark.django_db(transaction=True)
def test_the_pasted_token_line_signs_in_with_any_password_and_runs_nothing_else(live_server):
    demo_cmd.ensure_demo_team(HOSTILE, 2)
    for line, variable in [(demo_cmd.token_line(live_server.url, HOSTILE), "GPUCTL_TOKEN"),
                           (demo_cmd.token_line(live_server.url, HOSTILE, "TOKEN", export=False), "TOKEN")]:
        run = _bash(line, variable)
        assert "INJECTED" not in run.stdout + run.stderr and "SUBST" not in run.stdout + run.stderr
        assert "TICK" not in run.stdout + run.stderr
        assert re.fullmatch(rf"rc=0 {variable}=[0-9a-f]{{64}}", run.stdout.strip()), (run.stdout, run.stderr)
    spaced = "two words here"
    demo_cmd.ensure_demo_team(spaced, 2)
    run = _bash(demo_cmd.token_line(live_server.url, spaced))
    assert re.fullmatch(r"rc=0 GPUCTL_TOKEN=[0-9a-f]{64}", run.stdout.strip()), (run.stdout, run.stderr)


@pytest.mark.django_db
def test_the_submit_lines_quote_their_queue_and_command():
    from gpuplatform import services

    services.register_node("local-0", flavor="H200", gpus=[{"index": i, "uuid": f"GPU-0-{i}"} for i in range(2)])
    demo_cmd.ensure_demo_team("pw", 2)
    command = f"{shlex.quote('/opt/my python/bin/python')} {shlex.quote('/a b/ex.py')} --say \"it's $HOME\""
    (line,) = demo_cmd.submit_hint_lines("http://x", command, tasks=2, gpus=1, name="rendezvous")
    assert shlex.split(line) == ["gpuctl", "submit", "--queue", "demo", "--name", "rendezvous", "--tasks", "2",
                                 "--gpus", "1", "--command", command]
    assert shlex.split(command)[:2] == ["/opt/my python/bin/python", "/a b/ex.py"]  # the local banner's quoting
    # the plain case reads as before
    (plain,) = demo_cmd.submit_hint_lines("http://x", "sleep 1", tasks=2, gpus=1, name="hello")
    assert plain == "  gpuctl submit --queue demo --name hello --tasks 2 --gpus 1 --command 'sleep 1'"


# -- 3 and 4: a restart clears the earlier runs' events and says what it cleared --------------------------------------

def _admin_actions_at(when: datetime) -> None:
    """What an admin did in the last run, at its cluster clock `when`: a node cordoned, a quota changed, and a job
    submitted by hand."""
    from gpuplatform import clock as cluster_clock
    from gpuplatform import services
    from gpuplatform.models import Node, Queue, Team

    cluster_clock.use(lambda: when)
    try:
        services.cordon_node(Node.objects.get(name="node-a"), reason="trial 27")
        services.set_quota(Queue.objects.get(name="red"), "gpu", 0, 6, None)
        services.submit_job(team=Team.objects.get(name="red"), queue=Queue.objects.get(name="red"), name="by-hand",
                            command="sleep 60", roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 1}])
    finally:
        cluster_clock.use(None)


@pytest.mark.django_db(transaction=True)
def test_a_restart_clears_the_earlier_runs_events_and_says_so(tiny_importers):
    from gpuplatform.models import Event, Job, Node, Quota

    call_command(*RUN, stdout=io.StringIO())
    _admin_actions_at(EPOCH + timedelta(days=3))  # later than the new run's clock ever gets in this test
    later = Event.objects.filter(time__gt=EPOCH + timedelta(days=2)).exclude(job__isnull=False)
    kinds = set(later.values_list("kind", flat=True))
    assert len(kinds) >= 2, kinds  # the cordon and the quota change
    jobs = Job.objects.count()
    assert Job.objects.filter(name="by-hand").exists()
    out = io.StringIO()
    call_command(*RUN, stdout=out)
    text = out.getvalue()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("previous demo workload cleared")]
    assert line.startswith(f"previous demo workload cleared: {jobs} jobs (the trace's and any submitted by hand) ")
    assert re.search(r"and \d+ other events? of earlier runs \(nodes cordoned, quotas changed", line), line
    assert "keep that state" in line and "--keep continues the workload instead" in line
    assert not Event.objects.filter(kind__in=kinds).exists()
    assert not Event.objects.filter(time__gt=EPOCH + timedelta(days=2)).exists()
    # the state those events recorded stays, and so does the set-up's audit at the trace's t = 0
    assert Node.objects.get(name="node-a").state == "cordoned"
    assert Quota.objects.get(queue__name="red", flavor="gpu").quota == 6
    assert Event.objects.filter(kind="team_created", time=EPOCH).exists()
    # the newest-first list starts with this run's events: the latest reset mark is at or above every other
    newest = Event.objects.order_by("-time", "-id").first()
    reset = Event.objects.filter(kind="workload_reset").order_by("-pk").first()
    assert newest.time >= reset.time and Event.objects.filter(kind="workload_reset").count() >= 1


@pytest.mark.django_db(transaction=True)
def test_keep_still_keeps_the_earlier_runs_events(tiny_importers):
    from gpuplatform.models import Event

    call_command(*RUN, stdout=io.StringIO())
    _admin_actions_at(EPOCH + timedelta(hours=1))
    before = set(Event.objects.filter(job__isnull=True, cycle__isnull=True,
                                      time=EPOCH + timedelta(hours=1)).values_list("pk", flat=True))
    assert before
    out = io.StringIO()
    call_command(*RUN, "--keep", stdout=out)
    assert "cleared" not in out.getvalue()
    assert before <= set(Event.objects.values_list("pk", flat=True))


def test_the_clearing_line_without_other_events():
    assert demo_cmd.cleared_text({"jobs": 1, "events": 0}) == (
        "previous demo workload cleared: 1 job (the trace's and any submitted by hand) with their events, samples "
        "and cycles (--keep continues the workload instead)")
