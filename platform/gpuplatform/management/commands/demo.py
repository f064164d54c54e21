"""The whole product on a laptop, on real data: `python manage.py demo` (what `make demo` runs).

1. migrate the database (SQLite by default; WAL mode so the pages read while the loop writes);
2. load the Philly cluster through the importer registry and services.load_cluster_spec, unless loaded;
3. create the platform admin and one user per team (username = team name), print how to log in;
4. clear the previous demo's workload (jobs, those submitted by hand included, their events, samples, cycles, and in
   the trace demo the earlier runs' other events; the cluster, its state and users stay), or with --keep
   continue it from its cluster clock (no trace job submitted twice). Every check that can refuse (the port
   first, then another demo running on the same database: DatabaseHold) comes before this step;
5. serve the pages on 127.0.0.1:8000 in a thread (Django's WSGI server, threaded, no autoreload);
6. replay the Philly trace on a simulated clock from a busy point of the trace (warm start: the jobs
   the trace has running there come in at once with their remaining run time): every tick the
   TraceFeeder submits the jobs that have arrived and finishes the ones whose trace duration has
   elapsed, then one scheduling cycle runs at the simulated time (gpuplatform.scheduling.store.run_cycle_once).
   Until Ctrl-C (or SIGTERM), or --duration-seconds; started by make (`make demo`), also when make stops (follow_make).

Local mode, `python manage.py demo --local-agents N` (`make demo-local`; N from 1 to MAX_LOCAL_AGENTS, 64: each
agent is a process): the product for real on this machine instead of the trace replay. Wall clock; the web
server, the scheduling loop (in-process) and N node agents (real `gpu_agent` processes on loopback, each a node
with --gpus-per-agent GPUs copied from the recorded H200 dump, or the real NVML with --real-gpus) that start,
watch and stop the tasks the cycle binds; a team `demo` with a queue of that many GPUs; it prints how to submit
the 2-task rendezvous example (examples/rendezvous.py). It refuses a database that holds a simulated cluster
(use another DATABASE_URL: `make demo-local` uses db-local.sqlite3).

Slurm mode, `python manage.py demo --slurm` (`make demo-slurm`): the same, with a private local Slurm of two
nodes (gpuplatform.slurm.local: munged, slurmctld and two `slurmd -N`, 2 GPU GRES each on placeholder device
files, under .demo-slurm/) instead of node agents, and the Slurm backend's loop (gpuplatform.slurm.backend)
in this process: each gang the cycle binds becomes one Slurm job on exactly the chosen nodes; the job page
shows its Slurm job id. Needs root and Debian's munge, slurmctld, slurmd and slurm-client (`make slurm`).

Options: --port, --speed (simulated seconds per wall second; default 600 = 10 minutes a second),
--start-day (replay day to start at), --scale / --compress (passed to the importers), --no-server,
--duration-seconds, --tick (wall seconds between cycles), --password (or DEMO_PASSWORD), --cold-start, --keep.
"""
from __future__ import annotations

import argparse
import logging
import os
import secrets
import shlex
import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connection, transaction

from gpuplatform.management import options
from gpuplatform.management.demo_hold import DatabaseHold, database_variable, demo_database
from gpuplatform.wording import count

log = logging.getLogger("gpuplatform.demo")

DEFAULT_SPEED = 600.0  # simulated seconds per wall second: 10 minutes of trace a second
# Where the replay starts, unless --start-day says: the first hour at which the jobs the trace has running
# ask for BUSY_FRACTION of the cluster's GPUs. The Philly trace's first ~19 days see a handful of
# arrivals; on the default 624-GPU cluster this picks replay day ~21 (late September 2017), where ten
# teams submit and the running jobs already fill the cluster, so jobs pend from the first cycle on.
BUSY_FRACTION = 1.0
DEFAULT_TICK = 0.5  # wall seconds between two scheduling cycles (at least)
MAX_STEP = 1800.0  # a tick never advances the cluster clock by more than 30 simulated minutes
DEFAULT_CLUSTER = "philly"
# --local-agents' bound, as --gpus-per-agent's (new-user trial 27: it had none, and each agent is a process of its
# own: a `manage.py gpu_agent` of about 85 MB that polls the server every second, so LOCAL_AGENTS=100000 tried to
# start 100,000 of them). 64 agents of up to 64 GPUs each are 4,096 GPUs on one machine, already about 5 GB of agents.
MAX_LOCAL_AGENTS = 64


PROGRESS_SECONDS = 10.0  # wall seconds between two progress lines of the trace replay


def job_state_counts() -> dict[str, int]:
    """{state: number of jobs} of the jobs in the database (a kept workload's earlier jobs included)."""
    from django.db.models import Count

    from gpuplatform.models import Job

    return dict(Job.objects.values("state").annotate(n=Count("id")).order_by().values_list("state", "n"))


def workload_counts_text() -> str:
    """"pending P, running R, finished F": the jobs in the database by state (finished = succeeded + failed +
    cancelled; a kept workload's earlier jobs included). The one source of the replay's progress lines and of its
    last line, so that their figures agree (new-user trial 21, F17)."""
    counts = job_state_counts()
    finished = sum(counts.get(s, 0) for s in ("succeeded", "failed", "cancelled"))
    return f"pending {counts.get('pending', 0)}, running {counts.get('running', 0)}, finished {finished}"


def _number(minimum: float | None = None, *, above: float | None = None, at_most: float | None = None):
    """An argparse `type` for a finite float with bounds (gpuplatform.management.options.number)."""
    return options.number(minimum, above=above, at_most=at_most)


def _start_day(text: str) -> float:
    """--start-day: replay's --start rule and words (zero or more: "must be a finite number zero or more, got -1";
    at most options.MAX_DAYS: "must be at most 3,660 days, got 1e+06"), so both commands refuse a day alike."""
    value = options.number(0)(text)
    if value > options.MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be at most {options.MAX_DAYS:,} days, got {value:g}")
    return value


def _local_agents(text: str) -> int:
    """--local-agents N: 1 to MAX_LOCAL_AGENTS, in options.integer's words. 0 is refused, not taken as "no local
    mode": the option selects local mode (`make demo-local LOCAL_AGENTS=0` quietly ran the trace replay, and loaded
    the simulated cluster into db-local.sqlite3, where every later `make demo-local` then refused; new-user trial 27).
    Leaving the option out runs the trace replay."""
    try:
        return options.integer(1, MAX_LOCAL_AGENTS)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (local mode runs N node agents, one process each; leave "
                                         f"--local-agents out for the trace replay, `make demo`)") from None


def _password(text: str) -> str:
    """--password: the demo users' password, not empty or blank (new-user trial 15, F8: `--password ''` was ignored
    without a word and random passwords printed)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (leave --password out for a random one, printed)")
    return text


def _reset_workload(at: datetime | None = None, *, events_after: datetime | None = None) -> dict:
    """Forget the previous demo run's workload; the cluster, teams, queues and users stay. A `workload_reset` Event
    at `at` (the new run's cluster clock; default now) marks where the GPU-hour ledger's records start again
    (gpuplatform.utilization: before it, the deleted run's busy hours would read as free: trial 19, F18).

    `events_after` (the trace demo: the trace's t = 0, where its set-up's events are stamped): every other Event
    dated after it goes too, the earlier runs' (nodes cordoned or uncordoned, quotas changed, earlier resets ...):
    the replay's clock starts again at each run, so they stood above the new run's events in the newest-first list
    until the replay caught up (new-user trial 27). The nodes, queues and quotas keep the state those events record.
    Returns {"jobs": jobs cleared (the trace's and those submitted by hand), "events": those other events cleared}.

    Housekeeping of the demo's own replayed data, not a platform action, so it is not a service."""
    from gpuplatform.audit import record_event
    from gpuplatform.models import Allocation, ClusterSample, Event, Job, QueueSample, SchedulerCycle, Task

    from django.db.models import Q
    from django.utils import timezone

    with transaction.atomic():
        if connection.vendor == "postgresql":
            # allocation.job_id / task_id and event.job_id have no foreign-key constraint (migration 0023_e2e9):
            # their writers lock the jobs and tasks they name FOR KEY SHARE. EXCLUSIVE waits for every such writer
            # (a cycle, an agent's report) to end and keeps new ones out until the deletes commit, so no row
            # written meanwhile is left naming a deleted job (plain reads go on)
            with connection.cursor() as cur:
                tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in (Job, Task))
                cur.execute(f"LOCK TABLE {tables} IN EXCLUSIVE MODE")
        counts = {"jobs": Job.objects.count()}
        Allocation.objects.all().delete()
        # The jobs' and the cycles' events go; the audit of teams, queues, quotas and users stays.
        Event.objects.filter(Q(job__isnull=False) | Q(cycle__isnull=False)).delete()
        counts["events"] = 0
        if events_after is not None:
            later = Event.objects.filter(time__gt=events_after)
            later.filter(kind="workload_reset").delete()  # the cleared runs' own marks: not counted
            counts["events"] = later.delete()[0]
        Job.objects.all().delete()  # cascades to roles and tasks
        QueueSample.objects.all().delete()
        ClusterSample.objects.all().delete()
        SchedulerCycle.objects.all().delete()
        record_event("workload_reset", f"demo workload reset ({counts['jobs']} jobs cleared): the GPU-hour ledger "
                     "starts again here", time=at or timezone.now(), data=counts)
    return counts


def _kept_clock() -> datetime | None:
    """Where a kept demo workload's cluster clock stopped: the latest cycle's clock, sample or job submission
    (None when the database holds no workload)."""
    from django.db.models import Max

    from gpuplatform.models import ClusterSample, Job, SchedulerCycle

    times = [SchedulerCycle.objects.aggregate(t=Max("clock"))["t"], ClusterSample.objects.aggregate(t=Max("time"))["t"],
             Job.objects.aggregate(t=Max("submitted_at"))["t"]]
    times = [t for t in times if t is not None]
    return max(times) if times else None


def cleared_text(cleared: dict) -> str:
    """The trace demo's line about what a restart without --keep cleared (`cleared`: _reset_workload's counts): every
    job, those submitted by hand included, and the earlier runs' other events (new-user trial 27)."""
    jobs, events = cleared["jobs"], cleared.get("events", 0)
    text = (f"previous demo workload cleared: {count(jobs, 'job')} (the trace's and any submitted by hand) with their "
            f"events, samples and cycles")
    if events:
        text += (f", and {count(events, 'other event')} of earlier runs (nodes cordoned, quotas changed ...: the "
                 f"nodes, queues and quotas keep that state), so the events list starts with this run's")
    return text + " (--keep continues the workload instead)"


class _QuietHandler:
    """Request handler factory that logs only errors and page loads, not the dashboard's polling."""

    @staticmethod
    def make():
        from django.core.servers.basehttp import WSGIRequestHandler

        class Handler(WSGIRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - signature from BaseHTTPRequestHandler
                path = getattr(self, "path", "")
                if "metrics.json" in path or path.startswith("/static/") or "/logs/" in path or (
                        path.startswith("/api/v1/nodes/") and path.rstrip("/").rsplit("/", 1)[-1]
                        in ("assignments", "heartbeat", "reports")):
                    return  # polling: the dashboard, the log view and the node agents
                super().log_message(format, *args)

        return Handler


def bind_server(host: str, port: int):
    """Bind and listen on host:port without serving yet (raises OSError when the port is taken); `serve` starts
    it. The demos bind first, before they migrate, clear or change anything, so a second demo started on a busy
    port refuses without touching the running one's database (new-user trial 11, F1)."""
    from django.core.servers.basehttp import ThreadedWSGIServer

    class Server(ThreadedWSGIServer):
        request_queue_size = 128  # Django's 10 reset connections under a burst of 30 clients (new-user trial 3)

    httpd = Server((host, port), _QuietHandler.make(), allow_reuse_address=True)
    httpd.daemon_threads = True
    return httpd


def serve(httpd):
    """Serve the WSGI app on a server from `bind_server` in a daemon thread; returns it (.shutdown() stops)."""
    from django.core.servers.basehttp import get_internal_wsgi_application

    httpd.set_app(get_internal_wsgi_application())
    thread = threading.Thread(target=httpd.serve_forever, name="demo-web", daemon=True)
    thread.start()
    return httpd


def start_server(host: str, port: int):
    """Serve the WSGI app in a daemon thread; returns the server (call .shutdown() to stop)."""
    return serve(bind_server(host, port))


def listen_or_refuse(host: str, port: int):
    """`bind_server`, or a CommandError saying that something (most likely a demo) already listens there and
    that nothing was changed."""
    try:
        return bind_server(host, port)
    except OSError as exc:
        raise CommandError(
            f"cannot listen on {host}:{port}: {exc}: a demo (or another server) already runs there. Nothing "
            f"was changed (its jobs are untouched): stop it first, or use --port and another {database_variable()} (a "
            f"second demo on the same database refuses)") from exc


# Reads POST /api/v1/auth-token/'s answer on stdin: prints the token, or says what the server answered instead
# (a 400 such as "demo already holds 20 unexpired tokens", a wrong password, nothing when it is not running) on
# stderr and exits 1; never a traceback (new-user trial 22, G5: `...)["token"]` was a KeyError). README shows it.
TOKEN_FROM_ANSWER = ("python3 -c 'import json,sys; r=sys.stdin.read(); a=json.loads(r) if r[:1]==\"{\" else {}; "
                     "print(a[\"token\"]) if \"token\" in a else sys.exit(\"no token: \"+(r.strip() or "
                     "\"no answer (is the server running?)\")[:1000])'")

# The demos' users keep only their newest few API tokens across restarts (revoke_demo_tokens): a token in use in
# a shell still works after a restart, and the printed token line never meets API_TOKENS_PER_USER (20).
DEMO_TOKENS_KEPT = 5


def token_line(api: str, password: str, variable: str = "GPUCTL_TOKEN", *, export: bool = True) -> str:
    """The shell line the demos print to get user demo's API token into `variable`; on a refusal it prints the
    server's answer and the line's status is 1 (the variable is set only with a token). The password is shell-quoted
    and form-encoded by curl (--data-urlencode), so any password pastes as it is: one with a space, a `;`, `$(...)`,
    `&` or `%` (new-user trial 27: DEMO_PASSWORD='p w;echo INJECTED' made the pasted line run `echo INJECTED`)."""
    fetch = (f"{variable}=$(curl -s -X POST {shlex.quote(api + '/api/v1/auth-token/')} -d username=demo "
             f"--data-urlencode {shlex.quote('password=' + password)} | {TOKEN_FROM_ANSWER})")
    return f"  {fetch} && export {variable}" if export else f"  {fetch}"


def revoke_demo_tokens(users) -> None:
    """Each of the demo's own `users` keeps its DEMO_TOKENS_KEPT newest API tokens; older ones are revoked (a
    restart used to keep every one, so the printed token line met API_TOKENS_PER_USER after a few runs)."""
    from gpuplatform import services

    for user in users:
        services.revoke_api_tokens(user, keep=DEMO_TOKENS_KEPT)


def ensure_demo_team(password: str, gpus: int, warn=None):
    """Team `demo` with its queue `demo`, the platform admin `admin` and the team member `demo`, both with
    `password`; created or updated, through the services. Returns the team. Local mode, the Slurm demo and
    the federation demo's manager use it.

    The queue's H200 quota (guarantee 0, quota and limit = `gpus`) is set only when the queue has no H200
    quota yet (its first run): a quota stored by an earlier run, or changed by an admin since, is kept, as
    README promises ("a quota you changed in the last run is still there"; new-user trial 19, F13). A quota
    that the quota rules refuse (say another root queue's quota already takes the cluster's GPUs) is not
    set: `warn(message)` (default: stderr) says so, and the demo starts anyway."""
    from gpuplatform import services
    from gpuplatform.errors import ValidationError
    from gpuplatform.models import Queue, Quota
    from gpuplatform.services.tenancy import team_named

    def _warn(message: str):
        (warn or (lambda m: sys.stderr.write(m + "\n")))(f"warning: {message}")

    # the team "demo" by the team name rule (a team `Demo` or `de-mo` made in the admin is it): not a refused creation
    team = team_named("demo") or services.create_team("demo")
    queue = Queue.objects.filter(name="demo").first()
    if queue is None:
        try:
            services.create_queue("demo", team=team, quotas={"H200": (0, gpus, gpus)})
        except ValidationError as exc:
            services.create_queue("demo", team=team)
            _warn(f"queue demo created without its H200 quota ({gpus}/{gpus}), which the quota rules refuse: "
                  f"{exc}; set one with gpuctl set-quota demo H200 or in the admin")
    elif not Quota.objects.filter(queue=queue, flavor="H200").exists():
        try:
            services.set_quota(queue, "H200", 0, gpus, gpus)
        except ValidationError as exc:
            _warn(f"queue demo has no H200 quota and its default ({gpus}/{gpus}) is refused by the quota "
                  f"rules: {exc}; set one with gpuctl set-quota demo H200 or in the admin")
    User = get_user_model()
    admin, _ = User.objects.get_or_create(username="admin")
    admin.is_staff = admin.is_superuser = True
    admin.set_password(password)
    admin.save()
    member, _ = User.objects.get_or_create(username="demo")
    member.set_password(password)
    member.save()
    revoke_demo_tokens([admin, member])
    if not team.memberships.filter(user=member).exists():  # a role given since (admin) is kept: a team's
        services.add_member(team, member, "member")        # last admin cannot be demoted (services.tenancy)
    return team


def demo_submit_queue() -> tuple[str | None, str]:
    """(queue name, note) for the submit hint the demos print: queue `demo` when it takes new jobs
    (job_rules.submit_queue_error: open, a leaf, no queue above it closing, closed or draining), else the first (by
    name) queue of team `demo` that does, note saying why `demo` does not; (None, why) when none does. A closed queue
    is kept as an admin left it (as its quota is), but never named in the hint (new-user trial 21, F14: a kept run
    printed `gpuctl submit --queue demo` for a closed queue demo, and the submit was refused)."""
    from gpuplatform.job_rules import submit_queue_error
    from gpuplatform.lifecycle import closed_ancestor
    from gpuplatform.models import Queue
    from gpuplatform.services.tenancy import team_named

    team = team_named("demo")
    queues = list(Queue.objects.filter(team=team).order_by("name")) if team is not None else []
    queues.sort(key=lambda q: q.name != "demo")  # queue demo first
    why = {}
    for q in queues:
        why[q.name] = submit_queue_error(q, has_children=Queue.objects.filter(parent=q).exists(), team=team,
                                         closed_ancestor=closed_ancestor(q.pk))
        if why[q.name] is None:
            return q.name, "" if q.name == "demo" else (why.get("demo") or "there is no queue demo")
    return None, why.get("demo") or "team demo has no queue"


def submit_hint_lines(api: str, command: str, *, tasks: int, gpus: int, name: str) -> list[str]:
    """The `gpuctl submit` line(s) of a demo's banner for an open queue of team demo (demo_submit_queue); when no
    such queue exists, how to reopen queue demo instead of a command that would be refused. The queue and the
    command are shell-quoted (shlex.quote), so the line pastes as printed whatever they hold."""
    queue, note = demo_submit_queue()
    if queue is None:
        return [f"  no queue of team demo takes jobs now: {note}; reopen it as admin in the web admin (Queues) or with",
                f"  curl -X PATCH -H \"Authorization: Token $ADMIN_TOKEN\" -H 'Content-Type: application/json' "
                f"{api}/api/v1/queues/demo/ -d '{{\"state\": \"open\"}}'"]
    lines = [f"  gpuctl submit --queue {shlex.quote(queue)} --name {shlex.quote(name)} --tasks {tasks} --gpus {gpus} "
             f"--command {shlex.quote(command)}"]
    if note:
        lines.append(f"  (queue {queue}, of team demo: {note})")
    return lines


# The jobs not finished when a demo stops, in this order, each state in the words of the stop line.
UNFINISHED_JOB_WORDS = (("running", "running"), ("admitted", "admitted"), ("preempting", "stopping"),
                        ("pending", "pending"))


def unfinished_jobs_text(counts: dict[str, int]) -> str:
    """What the jobs not finished were, by state (`counts`: job_state_counts): "1 job stopping, 1 pending", "2 jobs
    running", "no job live or pending" (new-user trial 26, F9: "(1 job(s) were still live ...)" for one job stopping
    and another pending)."""
    parts = [(counts[state], words) for state, words in UNFINISHED_JOB_WORDS if counts.get(state)]
    if not parts:
        return "no job live or pending"
    (n, words), rest = parts[0], parts[1:]
    return ", ".join([f"{count(n, 'job')} {words}"] + [f"{m} {w}" for m, w in rest])


def local_stop_message(what: str, jobs: dict[str, int] | None, left: list[int]) -> str:
    """The last line of a demo that ran agents: whether every process it started is gone, as checked
    (`left`: the pids still running). `jobs`: the jobs by state (job_state_counts), or None to leave them out."""
    jobs = unfinished_jobs_text(jobs) if jobs is not None else ""
    if left:
        pids = " ".join(map(str, left[:20])) + (" ..." if len(left) > 20 else "")
        runs = "runs" if len(left) == 1 else "run"
        return (f"{what} stopped{f' ({jobs})' if jobs else ''}; {count(len(left), 'process', 'processes')} it "
                f"started still {runs}: pid {pids} (kill {'it' if len(left) == 1 else 'them'} with kill -9)")
    # what the check cannot see is said, not claimed (trial 19b, F14: a process that escaped within one poll ran on
    # after "every process ... is gone")
    return (f"{what} stopped ({jobs + '; ' if jobs else ''}every process it started is gone, checked; out of its "
            f"sight: a process that dropped its task mark and left its session within one poll of its start, "
            f"docs/execution.md)")


# -- a demo that make started stops with make -----------------------------------------------------------

MAKE_NAMES = ("make", "gmake")
# The signals on which GNU make sets its handler back to SIG_DFL and waits for its children without passing the
# signal on (a terminal's Ctrl-C reaches them through the process group); SIGTERM it passes on to them itself.
MAKE_WAITING_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
STOP_SIGNALS = frozenset(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT))
PR_SET_PDEATHSIG = 1
MAKE_WATCH_SECONDS = 0.5


def caught_signals(pid: int) -> set[int] | None:
    """The signals process `pid` has a handler for (/proc/<pid>/status, SigCgt); None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
                    return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    except (OSError, ValueError, IndexError):
        pass
    return None


def started_by_make() -> int | None:
    """make's pid when make itself started this process (the Makefile's demo recipes `exec` the demo), else None:
    run from a shell, interactive or not (it must not stop because its shell does something), or by another
    program (a federation demo's worker: its manager), or where there is no /proc."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/comm") as fh:
            name = fh.read().strip()
    except OSError:
        return None
    return ppid if name in MAKE_NAMES else None


def follow_make(say) -> threading.Thread | None:
    """A demo that make started stops when make stops, however make alone is stopped (new-user trial 26, F2: `kill
    -TERM <make's pid>` left the demo, its agents and their tasks running under pid 1; a SIGINT to make alone did
    nothing). Call it in the main thread, first. Each way ends in the demo's own clean stop (its handlers of SIGTERM
    and SIGINT), which stops its agents and their tasks and says whether anything still runs:

    - SIGTERM: make passes it on to its child, this process (the recipes' `exec`);
    - make's death, SIGKILL included: the kernel sends this process SIGTERM (prctl PR_SET_PDEATHSIG; it follows the
      thread that forked this process, make's only one). make already gone before the prctl: SIGTERM at once;
    - SIGINT, SIGHUP or SIGQUIT to make alone: make sets the signal's handler back to SIG_DFL and waits for this
      process, passing nothing on; a thread sees the handler gone from /proc/<make>/status and, once the demo's
      stop handlers are set (a set-up is not cut short), sends this process SIGINT: it stops as on Ctrl-C.

    A stop signal this process got itself (Ctrl-C reaches the whole process group; make's SIGTERM) is the demo's own
    stop: the thread, told by signal.set_wakeup_fd, steps aside, so no second signal cuts that stop short. Returns
    the thread, or None when make did not start this process (or not on Linux, or not the main thread)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    make = started_by_make()
    if make is None:
        return None
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the thread below still sees make go
    caught = caught_signals(make)
    if os.getppid() != make or caught is None:  # make ended before the prctl: nothing will signal its death
        os.kill(os.getpid(), signal.SIGTERM)
        return None
    watched = {int(s) for s in MAKE_WAITING_SIGNALS} & caught
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    def got_own_stop_signal(timeout: float) -> bool:
        import select

        if not select.select([wake_r], [], [], timeout)[0]:
            return False
        try:
            return bool(STOP_SIGNALS & set(os.read(wake_r, 512)))
        except BlockingIOError:
            return False

    def watch() -> None:
        why = None
        while True:
            if got_own_stop_signal(MAKE_WATCH_SECONDS):
                return  # the demo stops on a signal of its own
            if why is None:
                now = caught_signals(make) if os.getppid() == make else None
                if now is None:
                    why = f"make (pid {make}) is gone"
                elif watched - now:
                    name = signal.Signals(min(watched - now)).name
                    why = f"make (pid {make}) got {name} and waits for the demo to end"
                continue  # one more look for the demo's own signal (Ctrl-C reaches both at once)
            if callable(signal.getsignal(signal.SIGTERM)):  # the demo's stop handlers are set: its set-up is done
                say(f"{why}: stopping the demo as Ctrl-C does")
                os.kill(os.getpid(), signal.SIGINT)
                return

    thread = threading.Thread(target=watch, name="demo-follow-make", daemon=True)
    thread.start()
    return thread


class Command(BaseCommand):
    help = "Run the demo: migrate, load the Philly cluster, create users, serve the pages, replay the trace."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=options.PORT, default=8000, help="web server port, 1 to 65535 (default 8000)")
        parser.add_argument("--speed", type=_number(above=0), default=DEFAULT_SPEED,
                            help=f"simulated seconds per wall second (default {DEFAULT_SPEED:g} = 10 min/s)")
        # day and second options: zero or more and at most options.MAX_DAYS days (new-user trial 14, F1 / F21:
        # --start-day -1 started at day 0 where replay --start -1 is refused; --tick 1e300 overflowed a wait)
        parser.add_argument("--start-day", type=_start_day, default=None,
                            help=f"replay day of the trace to start at, 0 to {options.MAX_DAYS} (default: the first "
                                 f"hour at which the trace's running jobs ask for the whole cluster)")
        from clusterspec.importers import CLUSTERS

        parser.add_argument("--cluster", default=None, choices=CLUSTERS,
                            help=f"cluster in the importer registry (default {DEFAULT_CLUSTER}; loaded on a fresh "
                                 f"database only)")
        parser.add_argument("--trace", default="philly", help="trace name in the importer registry")
        parser.add_argument("--scale", type=_number(above=0, at_most=1), default=None,
                            help="Philly cluster scale in (0, 1] (importer default if unset; fresh database only)")
        parser.add_argument("--compress", type=_number(0.001), default=None,
                            help="trace arrival compression, at least 0.001 as replay's (importer default if unset)")
        parser.add_argument("--tick", type=_number(minimum=0, at_most=3600), default=DEFAULT_TICK,
                            help="wall seconds between cycles, 0 to 3600")
        parser.add_argument("--no-server", action="store_true", help="do not start the web server (tests)")
        parser.add_argument("--duration-seconds", type=_number(minimum=0, at_most=options.MAX_SECONDS), default=None,
                            help=f"stop after this many wall seconds, at most {options.MAX_SECONDS:,} (default: run "
                                 f"until Ctrl-C)")
        parser.add_argument("--password", type=_password, default=None,
                            help="password for every demo user (default: $DEMO_PASSWORD, else a random one, printed). "
                                 "A command line shows in every user's process list: prefer DEMO_PASSWORD")
        parser.add_argument("--cold-start", action="store_true",
                            help="start on an empty cluster (default: the jobs the trace has running at the "
                                 "start day are submitted at once, with their remaining run time)")
        parser.add_argument("--keep", action="store_true",
                            help="keep the previous run's jobs and samples and continue from its cluster clock (the trace's "
                                 "later arrivals only; no trace job is submitted twice) instead of starting clean")
        parser.add_argument("--local-agents", type=_local_agents, default=0, metavar="N",
                            help=f"local mode: run N node agents on this machine, 1 to {MAX_LOCAL_AGENTS} (a process "
                                 f"each), that run the jobs for real (no trace replay; see the module docstring). "
                                 f"Left out: the trace replay")
        parser.add_argument("--slurm", action="store_true",
                            help="run over a private local Slurm of two nodes (needs root and `make slurm`)")
        parser.add_argument("--gpus-per-agent", type=options.integer(1, 64), default=2, metavar="K",
                            help="local mode: GPUs each agent reports, copies of the recorded H200 (default 2)")
        parser.add_argument("--real-gpus", action="store_true",
                            help="local mode: the agents read this machine's GPUs through NVML")
        parser.add_argument("--federation", type=options.integer(0), default=0, metavar="N",
                            help="a federation manager on --port and N local-mode workers on the next ports, each "
                                 "its own database (gpuplatform/federation/local.py, docs/federation.md)")

    # -- set-up ------------------------------------------------------------------------------------

    def _migrate(self):
        t0 = time.monotonic()
        # WhiteNoise warns at start-up when STATIC_ROOT is missing (it serves from the finders here).
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        if connection.vendor == "sqlite" and not connection.in_atomic_block:
            with connection.cursor() as cursor:  # readers do not wait for the loop's writes
                cursor.execute("PRAGMA journal_mode=WAL")
        self._say(f"database migrated ({connection.vendor}) in {time.monotonic() - t0:.1f}s")

    def _load_cluster(self, opts):
        from gpuplatform import services
        from clusterspec.importers import load_cluster
        from gpuplatform.models import Node

        if Node.objects.exists():
            self._say(f"cluster already loaded: {Node.objects.count()} nodes")
            given = [o for o in ("cluster", "scale") if opts[o] is not None]
            if given:
                names = " and ".join(f"--{o}" for o in given)
                self.stderr.write(
                    f"warning: {names} {'does' if len(given) == 1 else 'do'} not apply: a cluster is already loaded in this database ({connection.vendor}"
                    f" {connection.settings_dict.get('NAME')}); to start fresh with them, delete that database "
                    f"(`make demo`: rm db.sqlite3) or point {database_variable()} at a new one")
            return
        t0 = time.monotonic()
        kwargs = {} if opts["scale"] is None else {"scale": opts["scale"]}
        spec = load_cluster(opts["cluster"] or DEFAULT_CLUSTER, **kwargs)
        counts = services.load_cluster_spec(spec)
        self._say(f"cluster {spec.name} loaded in {time.monotonic() - t0:.1f}s: {counts.get('nodes')} nodes, "
                  f"{spec.gpus} GPUs, {counts.get('domains')} domains, {counts.get('queues')} queues")
        for note in spec.notes:
            self._say(f"  {note}")

    def _users(self, password: str | None) -> list[tuple[str, str, str]]:
        """Create or reset the admin and one member per team; returns (username, password, role) rows. Team
        logins are made on the first run only (the admin account is new), for the imported teams, and marked
        as the demo's (email <team>@demo.invalid); later runs reset only those. A team an admin creates later
        gets no login with the shared password, and an account the demo did not make is never touched."""
        from gpuplatform import services
        from gpuplatform.models import Membership, Team

        User = get_user_model()
        admin_pw = password or secrets.token_urlsafe(9)
        team_pw = password or secrets.token_urlsafe(9)
        admin, first_run = User.objects.get_or_create(username="admin", defaults={"email": "admin@example.invalid"})
        admin.is_staff = admin.is_superuser = True
        admin.set_password(admin_pw)
        admin.save()
        rows = [("admin", admin_pw, "platform admin (sees every team)")]
        revoke_demo_tokens([admin])
        team_hash = make_password(team_pw)  # hashing is slow on purpose: once for every team user
        for team in Team.objects.order_by("name"):
            marker = f"{team.name}@demo.invalid"
            user = User.objects.filter(username=team.name).first()
            if user is None and first_run:
                user = User.objects.create(username=team.name, email=marker)
            if user is None or user.email != marker:
                continue  # a team created after the first run, or an account the demo did not make
            user.password = team_hash
            user.save(update_fields=["password"])
            revoke_demo_tokens([user])
            if not Membership.objects.filter(user=user, team=team).exists():
                services.add_member(team, user, "member")
            rows.append((team.name, team_pw, f"member of team {team.name}"))
        return rows

    def _say(self, message: str):
        self.stdout.write(message)
        self.stdout.flush()

    @staticmethod
    def _run_until_stopped(stop: threading.Event, began: float, duration: float | None, every_second=None) -> None:
        """Wait until `stop` is set (Ctrl-C) or `duration` seconds (None: no limit) have passed since `began`
        (time.monotonic), calling `every_second()` once a second."""
        while not stop.is_set():
            stop.wait(1.0)
            if duration is not None and time.monotonic() - began > duration:
                return
            if every_second is not None:
                every_second()

    # -- the run -----------------------------------------------------------------------------------

    def handle(self, *args, **opts):
        self._held = None
        follow_make(self._say)  # started by make (the Makefile's demo targets): stop with make (new-user trial 26, F2)
        try:
            return self._handle(**opts)
        finally:
            if self._held is not None:
                self._held.release()
                self._held = None

    def _demo_password(self, given: str | None) -> str | None:
        """The demo users' password: --password (with a warning: a command line is in every user's `ps`), else the
        DEMO_PASSWORD environment variable (not on the command line; never passed on to a task: the agents strip
        DEMO_*), else None (a random one, printed). Raises CommandError for a blank DEMO_PASSWORD."""
        if given is not None:
            self.stderr.write("warning: --password is on this process's command line, which every user of this "
                              "machine can read (ps); DEMO_PASSWORD=... in the environment keeps it off")
            return given
        env = os.environ.get("DEMO_PASSWORD")
        if env is None:
            return None
        try:
            return _password(env)
        except argparse.ArgumentTypeError as exc:
            raise CommandError(f"DEMO_PASSWORD {exc}") from None

    def _hold_database(self, opts) -> None:
        """After the port (a demo on the same port is told so first) and before anything is migrated, cleared or
        changed: refuse when another demo runs on this database (DatabaseHold), else hold it until the demo ends."""
        self._held = DatabaseHold(None if opts.get("no_server") else opts["port"], **demo_database()).acquire()

    def _handle(self, **opts):
        from clusterspec.importers import load_trace
        from gpuplatform.models import Gpu
        from gpuplatform import clock as cluster_clock
        from gpuplatform.trace_feeder import SimClock, TraceFeeder, busy_start_seconds, trace_epoch

        t_start = time.monotonic()
        opts["password"] = self._demo_password(opts["password"])
        if opts["scale"] is not None and (opts["cluster"] or DEFAULT_CLUSTER) != "philly":
            raise CommandError(f"--scale applies to the philly cluster only, not --cluster {opts['cluster']}")
        # (the parser's types refuse these first; call_command's keyword options skip them)
        if not 0 <= opts["local_agents"] <= MAX_LOCAL_AGENTS or not 1 <= opts["gpus_per_agent"] <= 64:
            raise CommandError(f"--local-agents must be from 1 to {MAX_LOCAL_AGENTS} (0: left out, the trace replay) "
                               f"and --gpus-per-agent from 1 to 64, got --local-agents {opts['local_agents']} "
                               f"--gpus-per-agent {opts['gpus_per_agent']}")
        if opts["federation"] < 0 or opts["federation"] and opts["port"] + opts["federation"] > 65535:
            raise CommandError(f"--federation N serves its workers on --port + 1 .. --port + N: N must be >= 0 and "
                               f"--port + N at most 65535, got --port {opts['port']} --federation {opts['federation']}")
        if opts["federation"]:
            from gpuplatform.federation.local import run as run_federation

            return run_federation(self, opts)
        if opts["slurm"]:
            return self.run_slurm(opts)
        if opts["local_agents"]:
            return self.run_local(opts)
        t0 = time.monotonic()
        trace_kwargs = {} if opts["compress"] is None else {"compress": opts["compress"]}
        try:
            trace = load_trace(opts["trace"], **trace_kwargs)
        except (KeyError, TypeError, ValueError) as exc:
            raise CommandError(f"cannot load trace {opts['trace']!r}: {exc}") from exc
        epoch = trace_epoch(trace)
        t_trace = time.monotonic() - t0
        # Every check that can refuse comes before anything is cleared or changed: the port first (a demo
        # already running there keeps its jobs), then the replay's start (new-user trial 11, F1).
        server = None if opts["no_server"] else listen_or_refuse(opts["host"], opts["port"])
        try:
            self._hold_database(opts)
            self._migrate()
            # The set-up's audit events (teams, queues, members) are stamped on the cluster clock too, at the
            # trace's t = 0, before every replayed job's: at wall time (years after the replay's) they stayed at
            # the top of the newest-first events list and buried the replay and the admin's own actions
            # (new-user trial 8, F4).
            cluster_clock.use(lambda: epoch)
            try:
                self._load_cluster(opts)
                t0 = time.monotonic() - t_trace
                resume = _kept_clock() if opts["keep"] else None
                if resume is not None:
                    # --keep on a kept workload continues it: the clock goes on from where the last run stopped
                    # and only the trace's later arrivals come in; the warm start and the trace jobs already in
                    # the database are not submitted again (new-user trial 11, F4: they were live twice and the
                    # clock went back)
                    from gpuplatform.models import Job

                    start_day = (resume - epoch).total_seconds() / 86400.0
                    feeder = TraceFeeder(trace, epoch=epoch, start_seconds=start_day * 86400.0, warm_start=False,
                                         skip_ids=set(Job.objects.exclude(external_id="")
                                                      .values_list("external_id", flat=True)))
                    given = [o for o, v in (("start_day", opts["start_day"] is not None), ("cold_start", opts["cold_start"])) if v]
                    if given:
                        verb = "does" if len(given) == 1 else "do"
                        self.stderr.write(f"warning: {' and '.join('--' + o.replace('_', '-') for o in given)} {verb} "
                                          f"not apply with --keep: the kept workload continues from its clock")
                else:
                    start_day = opts["start_day"]
                    if start_day is None:
                        busy = busy_start_seconds(trace, Gpu.objects.count(), fraction=BUSY_FRACTION)
                        start_day = (busy or 0.0) / 86400.0
                    feeder = TraceFeeder(trace, epoch=epoch, start_seconds=start_day * 86400.0,
                                         warm_start=not opts["cold_start"])
                    if feeder.start is None:
                        raise CommandError(f"trace {trace.name} has no job after replay day {start_day:g}")
                start = resume or feeder.start
                if not opts["keep"]:
                    cleared = _reset_workload(start, events_after=epoch)
                    if cleared["jobs"] or cleared["events"]:
                        self._say(cleared_text(cleared))
                users = self._users(opts["password"])
            finally:
                cluster_clock.use(None)
        except BaseException:
            if server is not None:
                server.server_close()
            raise
        if resume is not None:
            warm = f"continuing the kept workload at {resume:%Y-%m-%d %H:%M} (--keep)"
        else:
            warm = "cold start" if opts["cold_start"] else f"{feeder.warm_jobs} running then (warm start)"
        self._say(f"trace {trace.name} read in {time.monotonic() - t0:.1f}s: {len(trace.jobs)} jobs; replay from "
                  f"day {start_day:.2f}: {warm}, {feeder.remaining} submitted from then on")
        for note in trace.notes:
            self._say(f"  {note}")

        if server is not None:
            serve(server)
        self._banner(opts, users, server is not None, feeder, start, time.monotonic() - t_start)

        if not settings.DEBUG:
            logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)  # a line per cycle is too much
        clock = SimClock(start, speed=opts["speed"], max_step=MAX_STEP)
        cluster_clock.use(lambda: clock.now)  # jobs submitted from the pages or the API get the simulated time
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            def _stop(signum, _frame):
                if stop.is_set() and signum == signal.SIGINT:
                    raise KeyboardInterrupt  # a second Ctrl-C: stop now, even inside a cycle
                self._say("\nstopping after this tick (Ctrl-C again to stop at once)")
                stop.set()

            signal.signal(signal.SIGTERM, _stop)
            signal.signal(signal.SIGINT, _stop)
        try:
            self.loop(feeder, clock, stop, tick=opts["tick"], duration=opts["duration_seconds"])
        except KeyboardInterrupt:
            self._say("\nstopping (Ctrl-C)")
        finally:
            stop.set()
            cluster_clock.use(None)
            if server is not None:
                server.shutdown()
                server.server_close()
            # the figures of the tick lines, read the same way (new-user trial 21, F17: with --keep this line counted
            # this run's feeder only and disagreed with the last tick); then what this run itself did
            self._say(f"demo stopped at cluster time {clock.now:%Y-%m-%d %H:%M}: {workload_counts_text()} "
                      f"({feeder.stats.submitted} trace jobs submitted by this run, {feeder.remaining} still to come "
                      f"in the trace)")

    def loop(self, feeder, clock, stop: threading.Event, *, tick: float, duration: float | None) -> int:
        """Feed and schedule until `stop` is set or `duration` wall seconds passed. Returns cycles run."""
        from gpuplatform.scheduling.store import run_cycle_once
        from gpuplatform.scheduling.tasks import forecast_in_thread, wait_for_forecast

        began = time.monotonic()
        cycles = 0
        last_report = began
        while not stop.is_set():
            t0 = time.monotonic()
            if duration is not None and t0 - began >= duration:
                break
            now = clock.tick()
            try:
                finished, submitted = feeder.advance(now)
                cycle = run_cycle_once(clock=now)
                cycles += cycle is not None
                if cycle is not None:
                    forecast_in_thread(now)  # estimated starts, in a thread of their own when due
            except KeyboardInterrupt:
                raise
            except Exception:  # noqa: BLE001 - the demo goes on; the cycle's error is recorded
                log.exception("demo tick failed at %s", now)
            finally:
                if not connection.in_atomic_block:  # (a test's transaction must stay open)
                    close_old_connections()
            if t0 - last_report >= PROGRESS_SECONDS:
                last_report = t0
                self._progress(now)
            stop.wait(max(0.0, tick - (time.monotonic() - t0)))
        wait_for_forecast()  # the demo's last forecast ends with the demo, not after it
        return cycles

    def _progress(self, now: datetime):
        from gpuplatform.models import ClusterSample

        sample = ClusterSample.objects.order_by("-time", "-id").first()
        alloc = f"{100 * sample.allocation_rate:.0f}%" if sample else "-"
        frag = f"{100 * sample.fragmentation_rate:.0f}%" if sample else "-"
        self._say(f"[{now:%Y-%m-%d %H:%M}] {workload_counts_text()}; allocation {alloc}, fragmentation {frag}")

    def _banner(self, opts, users, serving: bool, feeder, start: datetime, setup_seconds: float):
        url = f"http://{opts['host']}:{opts['port']}/"
        lines = ["", "=" * 72]
        if serving:
            lines.append(f"GPU platform demo: open {url}  (set-up took {setup_seconds:.0f}s)")
        lines += [
            f"Replaying trace {feeder.trace.name} from {start:%Y-%m-%d %H:%M} (cluster clock) at "
            f"{opts['speed'] / 60:g} simulated minutes per second. Ctrl-C stops.",
            "",
            "Log in as:",
        ]
        api = f"http://127.0.0.1:{opts.get('port') or 8000}"
        width = max(len(u) for u, _, _ in users)
        lines.append(f"  {users[0][0]:<{width}}  password {users[0][1]:<14}  {users[0][2]}")
        team_rows = users[1:]
        if team_rows:
            lines.append(f"  one user per team (username = team name), password {team_rows[0][1]}")
            lines.append("  teams:")
            names = [u for u, _, _ in team_rows]
            for i in range(0, len(names), 8):
                lines.append("    " + "  ".join(names[i:i + 8]))
        lines += ["", f"REST API: {api}/api/docs/ (token: POST {api}/api/v1/auth-token/; CLI: gpuctl --help)",
                  "=" * 72, ""]
        self._say("\n".join(lines))

    # -- local mode: the product for real on this machine ---------------------------------------------

    @staticmethod
    def _refuse_other_nodes(executor: str) -> None:
        from gpuplatform.models import Node

        simulated = Node.objects.exclude(executor=executor).count()
        if simulated:
            raise CommandError(f"this database holds other nodes ({simulated} not run by {executor}): run "
                               f"this mode on another database, e.g. `make demo-local` / `make demo-slurm` "
                               f"({database_variable()}=sqlite:///db-local.sqlite3 / db-slurm.sqlite3); nothing was changed")

    def _local_setup(self, opts, *, executor: str = "agent", gpus: int | None = None
                     ) -> tuple[list[tuple[str, str, str]], str]:
        """Team `demo`, its queue (quota = every local GPU), users admin and demo, the node-agents user and
        its token. Returns (users, agent token)."""
        from django.contrib.auth.models import Group

        from gpuplatform import services
        from gpuplatform.api.permissions import NODE_AGENT_GROUP
        from gpuplatform.models import NodeAgentScope

        self._refuse_other_nodes(executor)
        User = get_user_model()
        password = opts["password"] or secrets.token_urlsafe(9)
        gpus = opts["local_agents"] * opts["gpus_per_agent"] if gpus is None else gpus
        ensure_demo_team(password, gpus, warn=lambda m: self.stderr.write(m))
        agent, _ = User.objects.get_or_create(username="node-agent")
        agent.set_unusable_password()
        agent.save()
        agent.groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
        # The local agents' bootstrap token names the nodes it may add (local-0 ..): they join ready; any
        # other node it registered would join cordoned until an admin accepts it (models.NodeAgentScope).
        NodeAgentScope.objects.update_or_create(
            user=agent, defaults={"nodes": [f"local-{i}" for i in range(opts["local_agents"])]})
        # Tokens are stored hashed (services/tokens.py): a run cannot read the last run's, so it revokes them
        # and issues a fresh one for its agents.
        services.revoke_api_tokens(agent)
        token, _ = services.issue_api_token(agent, ttl=services.tokens.agent_token_ttl(), purpose="node-agent")
        return [("admin", password, "platform admin"), ("demo", password, "member of team demo")], token

    def run_slurm(self, opts) -> None:
        from django.utils import timezone

        from gpuplatform.models import Job, Node
        from gpuplatform.scheduling.tasks import run_loop
        from gpuplatform.slurm.backend import SlurmBackend
        from gpuplatform.slurm.cli import SlurmCLI, SubprocessRunner
        from gpuplatform.slurm.local import PACKAGES, LocalSlurm, SlurmSetupError, slurm_installed

        missing = slurm_installed()
        if missing:
            raise CommandError(f"Slurm is not installed (missing {', '.join(missing)}): `make slurm` "
                               f"(apt-get install {' '.join(PACKAGES)})")
        if opts["no_server"]:
            raise CommandError("--slurm needs the web server")
        # Every check that can refuse (the port, another mode's nodes, the local Slurm's start) comes before the
        # previous workload is cleared (new-user trial 11, F1).
        server = listen_or_refuse(opts["host"], opts["port"])
        nodes, gpus = ("gpn1", "gpn2"), 2
        root = Path(settings.BASE_DIR) / ".demo-slurm"
        local = LocalSlurm(root / "slurm", nodes=nodes, gpus=gpus, cpus=4)
        try:
            self._hold_database(opts)
            self._migrate()
            self._refuse_other_nodes("slurm")
            try:
                local.start()
            except SlurmSetupError as exc:
                raise CommandError(str(exc)) from exc
            if not opts["keep"]:
                _reset_workload(timezone.now())
            users, _ = self._local_setup(opts, executor="slurm", gpus=len(nodes) * gpus)
            backend = SlurmBackend(SlurmCLI(SubprocessRunner(str(local.conf)), partition="gpuplatform"),
                                   output_dir=str(root / "output"), jobcomp_file=str(local.jobcomp), flavor="H200")
            backend.sync_nodes(timezone.now())
        except BaseException:
            local.stop()
            server.server_close()
            raise
        serve(server)
        stop = threading.Event()
        loop = threading.Thread(target=run_loop, name="demo-cycle", daemon=True,
                                kwargs={"interval_seconds": 1.0, "clock_fn": timezone.now, "stop_event": stop,
                                        "forecast": True})
        loop.start()

        def drive():
            from django.db import close_old_connections
            while not stop.is_set():
                try:
                    backend.sync()
                except Exception as exc:  # noqa: BLE001 - the demo keeps running; the next round retries
                    self._say(f"slurm backend round failed: {exc}")
                close_old_connections()
                stop.wait(1.0)

        driver = threading.Thread(target=drive, name="demo-slurm", daemon=True)
        driver.start()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())
        began = time.monotonic()
        api = f"http://127.0.0.1:{opts['port']}"
        rows = list(Node.objects.filter(executor=Node.Executor.SLURM).values_list("name", "gpu_count"))
        lines = ["", "=" * 72, f"GPU platform over Slurm: open http://{opts['host']}:{opts['port']}/",
                 f"{len(rows)} Slurm node(s): " + ", ".join(f"{n} ({g} GPUs)" for n, g in rows)
                 + f"; partition gpuplatform; {backend.mode} mode",
                 f"Slurm's files: {local.dir} (SLURM_CONF={local.conf}); task output: {backend.output_dir}",
                 "", "Log in as:"]
        lines += [f"  {u:<6} password {p:<14} {r}" for u, p, r in users]
        lines += ["", "Submit a 2-node gang (Jobs > Submit, or):",
                  f"  export GPUCTL_API={api}",
                  token_line(api, users[1][1]),
                  *submit_hint_lines(api, 'bash -c "echo rank $RANK on $SLURMD_NODENAME; sleep 60"', tasks=2, gpus=2,
                                     name="hello"),
                  f"  SLURM_CONF={shlex.quote(str(local.conf))} squeue   # the Slurm job; its id is on the job page",
                  "Ctrl-C stops the server, the backend and the local Slurm (its jobs are cancelled).", "=" * 72, ""]
        self._say("\n".join(lines))
        try:
            self._run_until_stopped(stop, began, opts["duration_seconds"])
        finally:
            stop.set()
            self._say("stopping the backend and the local Slurm ...")
            driver.join(timeout=10)
            loop.join(timeout=10)
            still = local.stop()  # what of this Slurm's nodes still runs after its sweep (trial 19, F12)
            server.shutdown()
            server.server_close()
            jobs = job_state_counts()
            live = sum(jobs.get(state, 0) for state in Job.LIVE_STATES)
            killed = len(getattr(local, "killed", ()) or ())
            left = (f"{len(still)} process(es) of its nodes STILL RUN: {'; '.join(still[:5])}" if still else
                    "every process of its nodes is gone, checked"
                    + (f" ({killed} left over by Slurm were killed)" if killed else ""))
            cancelled = f"; Slurm cancelled the Slurm {'job' if live == 1 else 'jobs'} of the live ones" if live else ""
            self._say(f"Slurm demo stopped ({unfinished_jobs_text(jobs)}{cancelled}; {left})")

    def run_local(self, opts) -> None:
        from django.utils import timezone

        from gpuplatform.agent.local import start_agents, stop_agents
        from gpuplatform.models import Node
        from gpuplatform.scheduling.tasks import run_loop

        if opts["no_server"]:
            raise CommandError("--local-agents needs the web server: the agents talk to it over REST")
        # The port and another mode's nodes are checked before the previous workload is cleared (new-user
        # trial 11, F1).
        server = listen_or_refuse(opts["host"], opts["port"])
        try:
            self._hold_database(opts)
            self._migrate()
            self._refuse_other_nodes("agent")
            if not opts["keep"]:
                _reset_workload(timezone.now())
            users, token = self._local_setup(opts)
        except BaseException:
            server.server_close()
            raise
        serve(server)
        # This process answers the agents' assignments calls: they poll at the interval it tells them.
        settings.AGENT_POLL_SECONDS = 1.0
        if not settings.DEBUG:
            logging.getLogger("gpuplatform.scheduling.store").setLevel(logging.WARNING)  # a line per cycle is too much
        api = f"http://127.0.0.1:{opts['port']}"
        root = Path(os.environ.get("DEMO_AGENTS_DIR") or Path(settings.BASE_DIR) / ".demo-agents")
        since = timezone.now()
        agents = start_agents(api, token, opts["local_agents"], root=root, gpus=opts["gpus_per_agent"],
                              poll=1.0, interval=5.0, real_gpus=opts["real_gpus"], keep=opts["keep"])
        stop = threading.Event()
        loop = threading.Thread(target=run_loop, name="demo-cycle", daemon=True,
                                kwargs={"interval_seconds": 1.0, "clock_fn": timezone.now, "stop_event": stop,
                                        "forecast": True})
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())
        began = time.monotonic()
        deadline = began + 30
        # The cycle (and its failure detection) starts once this run's agents have reported (registration
        # is a heartbeat), at most 30 s: on a restart the nodes of the last run are there with its last, stale
        # heartbeats, and a cycle started at once marked every one not_ready before its agent registered a
        # second later (new-user trial 14, F22). An agent that does not report in 30 s is judged as usual.
        names = [a.name for a in agents]
        while Node.objects.filter(executor=Node.Executor.AGENT, name__in=names,
                                  last_heartbeat__gte=since).count() < len(agents):
            if time.monotonic() > deadline or stop.is_set():
                break
            stop.wait(0.3)
        loop.start()
        nodes = list(Node.objects.filter(executor=Node.Executor.AGENT).values_list("name", "gpu_count"))
        example = Path(settings.BASE_DIR) / "examples" / "rendezvous.py"
        lines = ["", "=" * 72, f"GPU platform, local mode: open http://{opts['host']}:{opts['port']}/",
                 f"{len(nodes)} node(s) with agents: " + ", ".join(f"{n} ({g} GPUs)" for n, g in nodes),
                 f"agent logs and task directories: {root}", "", "Log in as:"]
        lines += [f"  {u:<6} password {p:<14} {r}" for u, p, r in users]
        lines += ["", "Submit a 2-task gang that rendezvous over TCP (Jobs > Submit, or):",
                  f"  export GPUCTL_API={api}",
                  token_line(api, users[1][1]),
                  *submit_hint_lines(api, f"{shlex.quote(sys.executable)} {shlex.quote(str(example))} --sleep 60",
                                     tasks=2, gpus=1, name="rendezvous"),
                  "  gpuctl logs <job id> --follow       # its rank 0 output; gpuctl cancel <id> stops it",
                  "Ctrl-C stops the server, the agents and every task they run.", "=" * 72, ""]
        self._say("\n".join(lines))
        reported: set[str] = set()

        def watch_agents() -> None:
            # A dead agent stays in `agents`: the stop below must still stop (and check) its tasks (new-user
            # trial 14, F2). Its tasks end by themselves too (the agents run with --stop-tasks-on-exit).
            dead = [a.name for a in agents if not a.alive() and a.name not in reported]
            if dead:
                reported.update(dead)
                # The demo knows at once what heartbeat expiry would find only after HEARTBEAT_TIMEOUT_SECONDS +
                # NODE_FAILURE_GRACE_SECONDS (3 min): report it now through failure handling's service function,
                # so their jobs are requeued within seconds (new-user trial 22, G8: they stayed `running` 3.5 min)
                from gpuplatform import clock as cluster_clock
                from gpuplatform.scheduling.failures import agent_exited

                requeued, stopping = [], []
                for name in dead:
                    try:
                        found = agent_exited(name, at=cluster_clock.now(),
                                             message="the local demo saw its process end; its tasks' supervisors "
                                                     "stop them")
                    except Exception as exc:  # noqa: BLE001 - heartbeat expiry still finds it; the demo goes on
                        self._say(f"reporting agent {name}'s exit failed ({exc}); heartbeat expiry will find it")
                        continue
                    requeued += found.requeued
                    stopping += found.stopping
                jobs = sorted(set(requeued) | set(stopping))
                self._say(f"agent(s) exited: {', '.join(dead)}; their tasks are being stopped by their supervisors, "
                          f"and Ctrl-C checks that none is left (see {root}/<name>.log); the node(s) are not_ready now"
                          + (f" and job(s) {', '.join(map(str, jobs))} are requeued whole (after their tasks on other "
                             f"nodes stop)" if jobs else "")
                          + "; a restarted agent's registration brings its node back")

        try:
            self._run_until_stopped(stop, began, opts["duration_seconds"], every_second=watch_agents)
        finally:
            stop.set()
            self._say("stopping the agents and their tasks ...")
            left = stop_agents(agents, stop_tasks=True)
            loop.join(timeout=10)
            server.shutdown()
            server.server_close()
            self._say(local_stop_message("local demo", job_state_counts(), left))
