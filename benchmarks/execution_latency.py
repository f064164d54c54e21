"""Execution latency with real node agents on this machine (docs/execution.md): bind to process start, stop,
agent footprint.

    python benchmarks/execution_latency.py [--quick] [--db auto|postgres|sqlite] [--keep-dirs]

What runs, as the local mode (`manage.py demo --local-agents N`) runs it: the web server in a thread of this
process (demo.start_server, on a free loopback port), the scheduling loop in another thread
(gpuplatform.scheduling.tasks.run_loop, wall clock, 1 s between cycles), and real `manage.py gpu_agent`
processes started with gpuplatform.agent.local.start_agents (GPUs copied from the recorded H200 dump).
Database: a scratch PostgreSQL database `gpuplatform_bench` on the server of DATABASE_URL when it is a
postgres:// URL (created and dropped here), else a scratch SQLite file in a temporary directory (never the
developer's db.sqlite3).

1. Bind -> process start, for gangs of 1, 8 and 64 one-GPU tasks (`sleep`) on 8 agents x 8 GPUs, at agent
   poll intervals 1.0 s and 0.2 s (the server's AGENT_POLL_SECONDS, which the agents adopt from every
   assignments answer; the agents are also started with --poll equal to the first value). Measured per
   task from the job's `bound_at` (the cycle's clock, taken when the cycle begins) to the start time of the
   task's own process (the supervisor's child) in /proc/<pid>/stat (clock ticks since boot, 10 ms, turned
   into wall time with CLOCK_BOOTTIME). Also recorded per task, all on this machine's clock: the cycle's
   commit (run_loop's on_cycle), the first assignments answer listing the task (the web server's WSGI app
   is wrapped to time it), the agent's Popen of the supervisor (meta.json `started_at`), and Task.started_at
   (the server's receive time of the "started" report).
2. Stop: services.cancel_job -> no live (non-zombie) process of the job left, checked every 20 ms on the
   recorded pids (supervisors and their descendants, with their start times) and, at the end, on every
   process of their sessions / groups. Every repetition of part 1 ends with a cancel (tasks that exit on
   SIGTERM); separate repetitions run a task that ignores SIGTERM (`sh -c "trap '' TERM; exec sleep ..."`)
   with the queue's preemption_grace_seconds = 3.
3. Agent footprint with 64 running `sleep` tasks: 8 agents x 8 tasks, then 1 agent x 64 tasks (--gpus 64;
   the 8 agents are stopped and their nodes cordoned first): CPU seconds per minute of each agent
   (utime + stime from /proc/<pid>/stat over the window), the agents' RSS and PSS, each supervisor's RSS
   and PSS, and this process's CPU (web server + cycle loop + the sampling) over the same window.

Every process started here (agents, supervisors, tasks), the web server and the cycle thread are stopped in
a `finally` (Ctrl-C and SIGTERM included); leftovers found after that are killed and counted in the result.
Called from benchmarks/run.py after other benchmarks configured Django in the same process, it runs itself
in a child process. Figures: benchmarks/results/execution_latency_<mode>.json.
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import _common as C
from gpuplatform.agent.executor import proc_stat, scan_proc

SCRATCH_PG = "gpuplatform_bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SLEEP = ["sleep", "3600"]
IGNORE_TERM = ["sh", "-c", "trap '' TERM; exec sleep 3600"]
TASK_TIMES = ("commit", "fetched", "popen", "supervisor_start", "process_start", "reported")

log = logging.getLogger("bench.execution")


# ------------------------------------------------------------------------------------------------ /proc helpers
def boot_offset() -> float:
    """time.time() - CLOCK_BOOTTIME: add it to a /proc start time (seconds since boot) to get wall time."""
    vals = []
    for _ in range(5):
        a = time.time()
        b = time.clock_gettime(time.CLOCK_BOOTTIME)
        c = time.time()
        vals.append((a + c) / 2 - b)
    return statistics.median(vals)


def _fields(st) -> dict:
    return {"state": st.state, "ppid": st.ppid, "pgid": st.pgid, "sid": st.sid, "utime": st.utime,
            "stime": st.stime, "start": st.start_time}


def stat(pid: int) -> dict | None:
    """One process as the agent's own /proc reader sees it (executor.proc_stat), as a dict."""
    st = proc_stat(pid)
    return None if st is None else _fields(st)


def all_procs() -> dict[int, dict]:
    return {pid: _fields(st) for pid, st in scan_proc().items()}


def alive(pid: int, start: int) -> bool:
    """The process `pid` with this start time exists and is not a zombie."""
    st = stat(pid)
    return st is not None and st["start"] == start and st["state"] not in ("Z", "X", "x")


def exists(pid: int, start: int) -> bool:
    st = stat(pid)
    return st is not None and st["start"] == start


def descendants(root: int, procs: dict[int, dict]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st["ppid"], []).append(pid)
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def cpu_seconds(pid: int) -> float | None:
    st = stat(pid)
    return None if st is None else (st["utime"] + st["stime"]) / CLK_TCK


def memory_mib(pid: int) -> tuple[float | None, float | None]:
    """(RSS, PSS) in MiB; None where unreadable."""
    rss = pss = None
    try:
        with open(f"/proc/{pid}/statm") as fh:
            rss = int(fh.read().split()[1]) * PAGE / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) / 1024
                    break
    except (OSError, ValueError):
        pass
    return rss, pss


def pstats(values: list[float]) -> dict:
    """n, median, mean, p90, p99 (nearest rank), min, max."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"n": 0}

    def rank(q):
        return v[min(len(v) - 1, max(0, int(-(-q * len(v) // 1)) - 1))]

    return {"n": len(v), "median": statistics.median(v), "mean": statistics.fmean(v), "p90": rank(0.9),
            "p99": rank(0.99), "min": v[0], "max": v[-1]}


# -------------------------------------------------------------------------------------------------- database
def choose_database(kind: str, tmp: Path) -> tuple[str, str]:
    """(vendor, DATABASE_URL for Django). PostgreSQL: a scratch database on DATABASE_URL's server."""
    url = os.environ.get("DATABASE_URL", "")
    if kind == "postgres" or (kind == "auto" and url.startswith(("postgres://", "postgresql://"))):
        server = url if url.startswith(("postgres://", "postgresql://")) else \
            "postgres://postgres@127.0.0.1:5432/postgres"
        u = urlparse(server)
        admin = f"{u.scheme}://{u.netloc}/postgres"
        import psycopg

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{SCRATCH_PG}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{SCRATCH_PG}"')
        return "postgresql", f"{u.scheme}://{u.netloc}/{SCRATCH_PG}"
    return "sqlite", f"sqlite:///{tmp / 'bench.sqlite3'}"


def drop_database(vendor: str, url: str) -> None:
    if vendor != "postgresql":
        return  # the SQLite file goes with the temporary directory
    import psycopg

    u = urlparse(url)
    with psycopg.connect(f"{u.scheme}://{u.netloc}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{SCRATCH_PG}" WITH (FORCE)')


# ---------------------------------------------------------------------------------------- server instrumentation
class AssignmentsTap:
    """WSGI wrapper around the web server's app: for every GET .../nodes/<name>/assignments/ it records when the
    answer was ready (time.time(), server side) and which (task, attempt, action) it listed."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.polls: dict[str, list[float]] = {}  # node -> answer times
        self.first_run: dict[tuple[int, int], float] = {}  # (task, attempt) -> first answer listing it "run"
        self.first_stop: dict[tuple[int, int], float] = {}
        self.served: list[tuple[float, float, int]] = []  # (answer time, seconds to build it, tasks listed)

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or not path.endswith("/assignments/"):
            return self.app(environ, start_response)
        t0 = time.time()
        result = self.app(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        t = time.time()
        node = path.rstrip("/").split("/")[-2]
        try:
            tasks = json.loads(body).get("tasks") or []
        except ValueError:
            tasks = []
        with self.lock:
            self.polls.setdefault(node, []).append(t)
            self.served.append((t, t - t0, len(tasks)))
            for x in tasks:
                key = (x.get("task"), x.get("attempt"))
                target = self.first_run if x.get("action") == "run" else self.first_stop
                target.setdefault(key, t)
        return [body]

    def intervals(self, since: float, until: float) -> dict:
        """Per node: the mean gap between its assignments answers in [since, until]; and their pooled stats."""
        gaps, per_node = [], {}
        with self.lock:
            items = {k: list(v) for k, v in self.polls.items()}
        for node, ts in items.items():
            ts = [t for t in ts if since <= t <= until]
            g = [b - a for a, b in zip(ts, ts[1:])]
            if g:
                per_node[node] = statistics.fmean(g)
                gaps += g
        with self.lock:
            served = [(d, n) for t, d, n in self.served if since <= t <= until]
        return {"pooled": pstats(gaps), "mean_per_node": per_node,
                "server_seconds_per_answer": pstats([d for d, _ in served]),
                "server_seconds_per_answer_listing_tasks": pstats([d for d, n in served if n])}


# ------------------------------------------------------------------------------------------------------ bench
class Bench:
    def __init__(self, args, tmp: Path):
        self.args, self.tmp = args, tmp
        self.root = tmp / "agents"
        self.agents = []  # every LocalAgent ever started
        self.cycle_commits: dict = {}  # cycle clock (datetime) -> time.time() after the cycle
        self.boot = boot_offset()
        self.report: dict = {}
        self.server = None
        self.stop_loop = threading.Event()
        self.loop_thread = None

    # -- set-up ---------------------------------------------------------------------------------------------
    def setup(self):
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group
        from django.core.management import call_command
        from django.db import connection
        from gpuplatform.services import issue_api_token

        from gpuplatform import services
        from gpuplatform.api.permissions import NODE_AGENT_GROUP

        t0 = time.monotonic()
        call_command("migrate", interactive=False, verbosity=0)
        if connection.vendor == "sqlite":
            with connection.cursor() as cur:  # as the demo: readers do not wait for the loop's writes
                cur.execute("PRAGMA journal_mode=WAL")
        self.report["migrate_seconds"] = time.monotonic() - t0
        team = services.create_team("bench")
        self.queue = services.create_queue("bench", team=team, quotas={"H200": (0, 128, 128)})
        self.queue.preemption_grace_seconds = self.args.grace
        self.queue.save(update_fields=["preemption_grace_seconds"])
        self.team = team
        User = get_user_model()
        agent, _ = User.objects.get_or_create(username="node-agent")
        agent.set_unusable_password()
        agent.save()
        agent.groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
        from gpuplatform.models import NodeAgentScope

        NodeAgentScope.objects.update_or_create(user=agent, defaults={"nodes": ["*"]})  # the bench's own agents
        self.token = issue_api_token(agent)[0]

    def start_server(self):
        from gpuplatform.management.commands.demo import start_server

        self.server = start_server("127.0.0.1", 0)
        quiet_logs()  # (the WSGI application's django.setup() configured logging again)
        self.tap = AssignmentsTap(self.server.get_app())
        self.server.set_app(self.tap)
        self.api = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start_loop(self):
        from django.utils import timezone

        from gpuplatform.scheduling.tasks import run_loop

        def on_cycle(cycle):
            if cycle is not None:
                self.cycle_commits[cycle.clock] = time.time()

        self.loop_thread = threading.Thread(
            target=run_loop, name="bench-cycle", daemon=True,
            kwargs={"interval_seconds": 1.0, "clock_fn": timezone.now, "stop_event": self.stop_loop,
                    "on_cycle": on_cycle})
        self.loop_thread.start()

    def set_poll(self, poll: float):
        """The server's poll_seconds (agents adopt it from the next answer); wait until every agent polled
        twice with it."""
        from django.conf import settings

        settings.AGENT_POLL_SECONDS = float(poll)
        t = time.time()
        deadline = time.monotonic() + 4 * max(poll, 2.0) + 5
        while time.monotonic() < deadline:
            with self.tap.lock:
                n = min(sum(1 for x in self.tap.polls.get(a.name, []) if x > t) for a in self.live_agents())
            if n >= 2:
                return
            time.sleep(0.05)
        raise RuntimeError("the agents do not poll any more")

    def live_agents(self) -> list:
        return [a for a in self.agents if a.alive()]

    def start_agents(self, count: int, gpus: int, prefix: str, poll: float) -> list:
        from gpuplatform.agent.local import start_agents
        from gpuplatform.models import Node

        t0 = time.monotonic()
        agents = start_agents(self.api, self.token, count, root=self.root, gpus=gpus, poll=poll, interval=5.0,
                              prefix=prefix)
        self.agents += agents
        names = {a.name for a in agents}
        deadline = time.monotonic() + 120
        while True:
            ready = set(Node.objects.filter(executor=Node.Executor.AGENT, name__in=names, state="ready")
                        .values_list("name", flat=True))
            polled = {n for n in names if self.tap.polls.get(n)}
            if ready == names and polled == names:
                break
            dead = [a.name for a in agents if not a.alive()]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"agents not up (dead: {dead}; see {self.root}/<name>.log)")
            time.sleep(0.2)
        flavors = sorted(set(Node.objects.filter(name__in=names).values_list("flavor", flat=True)))
        log.warning("%d agent(s) x %d GPUs up in %.1f s (flavor %s)", count, gpus, time.monotonic() - t0, flavors)
        return agents

    # -- one job --------------------------------------------------------------------------------------------
    def submit(self, tasks: int, command: list[str], name: str):
        from gpuplatform import services

        return services.submit_job(team=self.team, queue=self.queue, name=name, command=command,
                                   roles=[{"name": "worker", "tasks": tasks, "gpus_per_task": 1}])

    def wait_running(self, job, tasks: int, timeout: float = 120.0):
        from gpuplatform.models import Task

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = Task.objects.filter(job=job, started_at__isnull=False, state="running").count()
            if n == tasks:
                return
            time.sleep(0.1)
        raise RuntimeError(f"job {job.pk}: not all {tasks} tasks running after {timeout:.0f} s")

    def task_records(self, job) -> list[dict]:
        """Per task: ids, node, the times of its way from bind to running, and its pids."""
        from gpuplatform.models import Job, Task

        job = Job.objects.get(pk=job.pk)
        bound = job.bound_at.timestamp()
        commit = self.cycle_commits.get(job.bound_at)
        procs = all_procs()
        out = []
        for task_id, node, started_at in (Task.objects.filter(job=job).order_by("index")
                                          .values_list("id", "node__name", "started_at")):
            attempt = job.attempts
            tdir = self.root / node / "tasks" / f"{task_id}-{attempt}"
            meta = json.loads((tdir / "meta.json").read_text())
            sup = meta["pid"]
            kids = [p for p in procs if procs[p]["ppid"] == sup and procs[p]["state"] not in ("Z", "X")]
            child = kids[0] if kids else None
            rec = {"task": task_id, "attempt": attempt, "node": node, "bound": bound, "commit": commit,
                   "fetched": self.tap.first_run.get((task_id, attempt)), "popen": meta.get("started_at"),
                   "supervisor_start": (meta["start_time"] / CLK_TCK + self.boot) if meta.get("start_time") else None,
                   "process_start": (procs[child]["start"] / CLK_TCK + self.boot) if child else None,
                   "reported": started_at.timestamp() if started_at else None,
                   "pids": [(sup, meta.get("start_time"))] + [
                       (p, procs[p]["start"]) for p in descendants(sup, procs) if p in procs]}
            out.append(rec)
        return out

    def cancel_and_watch(self, job, records: list[dict], timeout: float = 60.0) -> dict:
        """cancel_job, then the time until no live process of the job is left (20 ms checks)."""
        from gpuplatform import services
        from gpuplatform.models import Job

        pids = [(p, s) for r in records for p, s in r["pids"] if s is not None]
        sups = {r["pids"][0][0] for r in records}
        t0 = time.time()
        services.cancel_job(Job.objects.get(pk=job.pk), reason="benchmark")
        t_call = time.time()
        left = list(pids)
        gone = None
        while time.time() - t0 < timeout:
            left = [ps for ps in left if alive(*ps)]
            if not left:
                gone = time.time()
                break
            time.sleep(0.02)
        reaped = None
        while gone is not None and time.time() - t0 < timeout:
            if not any(exists(*ps) for ps in pids):
                reaped = time.time()
                break
            time.sleep(0.02)
        # anything else in their sessions / process groups (a task that forked after we looked)
        stray = [pid for pid, st in all_procs().items()
                 if (st["sid"] in sups or st["pgid"] in sups) and st["state"] not in ("Z", "X")]
        # agent side: when the SIGTERM went out, from each task's meta.json
        sigterm = []
        for r in records:
            try:
                meta = json.loads((self.root / r["node"] / "tasks" / f"{r['task']}-{r['attempt']}" / "meta.json")
                                  .read_text())
                sigterm.append((meta.get("stop") or {}).get("requested_at"))
            except (OSError, ValueError):
                sigterm.append(None)
        ended = self.wait_final(job)
        sigterm = [s for s in sigterm if s]
        return {"cancel": t0, "cancel_call_s": t_call - t0, "gone_s": (gone - t0) if gone else None,
                "reaped_s": (reaped - t0) if reaped else None, "stray": len(stray),
                "sigterm_first_s": (min(sigterm) - t0) if sigterm else None,
                "sigterm_last_s": (max(sigterm) - t0) if sigterm else None,
                "job_final_s": (ended - t0) if ended else None, "processes": len(pids)}

    def wait_final(self, job, timeout: float = 60.0) -> float | None:
        """Wait until the job ended and its GPUs are free; returns the time it was seen ended."""
        from gpuplatform.models import Allocation, Job

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (Job.objects.filter(pk=job.pk, state__in=Job.FINAL_STATES).exists()
                    and not Allocation.objects.filter(job_id=job.pk, released_at__isnull=True).exists()):
                return time.time()
            time.sleep(0.05)
        return None

    # -- part 1 and 2 ---------------------------------------------------------------------------------------
    def latency_rep(self, size: int, command: list[str], label: str) -> tuple[list[dict], dict]:
        time.sleep(random.uniform(0.0, 0.4 if self.args.quick else 1.0))  # vary the phase against the loops
        job = self.submit(size, command, label)
        self.wait_running(job, size)
        time.sleep(0.3)  # the agents' next report round (logs, started) is not part of this job's start
        records = self.task_records(job)
        # cancel at a random phase of the agents' polls (else it always comes ~0.3 s after their last round)
        from django.conf import settings

        time.sleep(random.uniform(0.0, float(settings.AGENT_POLL_SECONDS)))
        stop = self.cancel_and_watch(job, records)
        return records, stop

    def latency(self, poll: float, sizes: dict[int, int], ignore_reps: int) -> dict:
        self.set_poll(poll)
        t_begin = time.time()
        out = {"poll_seconds": poll, "sizes": {}, "stop_ignore_sigterm": []}
        for size, reps in sizes.items():
            recs, stops = [], []
            for i in range(reps):
                r, s = self.latency_rep(size, SLEEP, f"lat-{poll}-{size}-{i}")
                recs.append(r)
                stops.append(s)
            out["sizes"][size] = {"reps": reps, "tasks": recs, "stops": stops, "summary": summarize(recs, stops)}
            s = out["sizes"][size]["summary"]
            print(f"  poll {poll:g} s, gang of {size:>2} x {reps}: bind -> process start median "
                  f"{s['bind_to_process']['median']:.3f} s, p99 {s['bind_to_process']['p99']:.3f} s; "
                  f"stop (cancel -> no process) median {s['stop_gone']['median']:.3f} s", flush=True)
        stops = []
        for i in range(ignore_reps):
            _r, s = self.latency_rep(1, IGNORE_TERM, f"ignore-{poll}-{i}")
            stops.append(s)
        out["stop_ignore_sigterm"] = {"reps": stops, "gone": pstats([s["gone_s"] for s in stops]),
                                      "sigterm": pstats([s["sigterm_first_s"] for s in stops]),
                                      "job_final": pstats([s["job_final_s"] for s in stops])}
        if stops:
            g = out["stop_ignore_sigterm"]["gone"]
            print(f"  poll {poll:g} s, task ignoring SIGTERM (grace {self.args.grace} s) x {len(stops)}: cancel -> "
                  f"no process median {g['median']:.3f} s, max {g['max']:.3f} s", flush=True)
        out["poll_intervals"] = self.tap.intervals(t_begin + 1, time.time())
        return out

    # -- part 3 ---------------------------------------------------------------------------------------------
    def footprint(self, agents: list, label: str, window: float, poll: float) -> dict:
        """64 `sleep` tasks on `agents`, then CPU and memory over `window` seconds."""
        self.set_poll(poll)
        idle = {a.name: memory_mib(a.process.pid) for a in agents}
        job = self.submit(64, SLEEP, re.sub(r"[^A-Za-z0-9._-]+", "-", f"footprint-{label}-{poll}"))  # a job name
        t_sub = time.monotonic()
        self.wait_running(job, 64)
        t_run = time.monotonic() - t_sub
        time.sleep(2.0 if self.args.quick else 5.0)  # starts reported, first logs shipped: settled
        records = self.task_records(job)
        sups = [r["pids"][0] for r in records]
        kids = [p for r in records for p in r["pids"][1:]]
        me = os.getpid()
        a0 = {a.name: cpu_seconds(a.process.pid) for a in agents}
        s0 = sum(cpu_seconds(p) or 0 for p, _ in sups)
        k0 = sum(cpu_seconds(p) or 0 for p, _ in kids)
        m0 = cpu_seconds(me)
        w0 = time.monotonic()
        samples = {a.name: [] for a in agents}
        sup_mem = []
        while time.monotonic() - w0 < window:
            for a in agents:
                samples[a.name].append(memory_mib(a.process.pid))
            time.sleep(min(2.0, max(0.0, window - (time.monotonic() - w0))))
        elapsed = time.monotonic() - w0
        a1 = {a.name: cpu_seconds(a.process.pid) for a in agents}
        s1 = sum(cpu_seconds(p) or 0 for p, _ in sups)
        k1 = sum(cpu_seconds(p) or 0 for p, _ in kids)
        m1 = cpu_seconds(me)
        for p, _ in sups:
            sup_mem.append(memory_mib(p))
        kid_mem = [memory_mib(p) for p, _ in kids]
        per_min = 60.0 / elapsed
        agent_cpu = {n: (a1[n] - a0[n]) * per_min for n in a0 if a0[n] is not None and a1[n] is not None}
        rss = {n: [x[0] for x in v if x[0] is not None] for n, v in samples.items()}
        pss = {n: [x[1] for x in v if x[1] is not None] for n, v in samples.items()}
        ivals = self.tap.intervals(time.time() - elapsed, time.time())
        stop = self.cancel_and_watch(job, records)
        res = {
            "agents": len(agents), "tasks": 64, "poll_seconds": poll, "window_seconds": elapsed,
            "all_running_after_s": t_run,
            "agent_cpu_s_per_min": agent_cpu, "agent_cpu_s_per_min_total": sum(agent_cpu.values()),
            "agent_cpu_s_per_min_per_agent": pstats(list(agent_cpu.values())),
            "agent_rss_mib_idle": {n: v[0] for n, v in idle.items()},
            "agent_pss_mib_idle": {n: v[1] for n, v in idle.items()},
            "agent_rss_mib": {n: {"median": statistics.median(v), "max": max(v)} for n, v in rss.items() if v},
            "agent_pss_mib": {n: {"median": statistics.median(v), "max": max(v)} for n, v in pss.items() if v},
            "supervisor_rss_mib": pstats([m[0] for m in sup_mem]),
            "supervisor_pss_mib": pstats([m[1] for m in sup_mem]),
            "supervisor_rss_mib_total": sum(m[0] or 0 for m in sup_mem),
            "supervisor_pss_mib_total": sum(m[1] or 0 for m in sup_mem),
            "task_rss_mib": pstats([m[0] for m in kid_mem]),
            "supervisors_cpu_s_per_min_total": (s1 - s0) * per_min,
            "tasks_cpu_s_per_min_total": (k1 - k0) * per_min,
            "control_plane_process_cpu_s_per_min": ((m1 - m0) * per_min) if m0 is not None else None,
            "poll_intervals": ivals, "stop": stop,
        }
        tot_rss = sum(v["median"] for v in res["agent_rss_mib"].values())
        print(f"  {label}, poll {poll:g} s, 64 sleep tasks, {elapsed:.0f} s: agents "
              f"{res['agent_cpu_s_per_min_total']:.2f} CPU s/min in all "
              f"({res['agent_cpu_s_per_min_per_agent']['median']:.2f} per agent), agent RSS "
              f"{tot_rss:.0f} MiB in all; supervisor RSS {res['supervisor_rss_mib']['median']:.1f} MiB "
              f"(PSS {res['supervisor_pss_mib']['median']:.1f}) per task; control-plane process "
              f"{res['control_plane_process_cpu_s_per_min']:.2f} CPU s/min", flush=True)
        return res

    # -- tear-down ------------------------------------------------------------------------------------------
    def stop_agents(self, agents: list):
        from gpuplatform.agent.local import stop_agents

        stop_agents([a for a in agents if a.alive() or a.work_dir.exists()], stop_tasks=True, grace=3.0)

    def cordon(self, agents: list):
        from gpuplatform import services
        from gpuplatform.models import Node

        for node in Node.objects.filter(name__in=[a.name for a in agents], state="ready"):
            services.cordon_node(node, reason="benchmark: next configuration")

    def teardown(self) -> dict:
        """Stop everything this run started; returns what had to be killed at the end."""
        out = {"leftover_killed": 0}
        self.stop_loop.set()
        try:
            self.stop_agents(self.agents)
        except Exception:  # noqa: BLE001 - keep tearing down
            log.exception("stop_agents failed")
        for a in self.agents:  # the agents themselves
            if a.alive():
                a.process.kill()
                a.process.wait()
                out["leftover_killed"] += 1
        # any supervisor / task still alive: every meta.json pid, its session, group and descendants
        sups = set()
        for path in glob.glob(str(self.root / "*" / "tasks" / "*" / "meta.json")):
            try:
                m = json.loads(Path(path).read_text())
            except (OSError, ValueError):
                continue
            if m.get("pid") and m.get("start_time") and exists(m["pid"], m["start_time"]):
                sups.add(m["pid"])
        for _ in range(3):
            procs = all_procs()
            victims = {p for p, st in procs.items() if (st["sid"] in sups or st["pgid"] in sups)
                       and st["state"] not in ("Z", "X")}
            for s in sups:
                victims.update(descendants(s, procs))
            victims.discard(os.getpid())
            if not victims:
                break
            for p in victims:
                try:
                    os.kill(p, signal.SIGKILL)
                    out["leftover_killed"] += 1
                except OSError:
                    pass
            time.sleep(0.2)
        if self.loop_thread is not None:
            self.loop_thread.join(timeout=30)
            out["cycle_thread_alive"] = self.loop_thread.is_alive()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            web = [t for t in threading.enumerate() if t.name == "demo-web"]
            for t in web:
                t.join(timeout=10)
            out["web_thread_alive"] = any(t.is_alive() for t in web)
        out["agents_alive"] = sum(a.alive() for a in self.agents)
        return out


def summarize(recs: list[list[dict]], stops: list[dict]) -> dict:
    tasks = [t for r in recs for t in r]

    def d(a, b):
        return [(t[b] - t[a]) if t.get(a) is not None and t.get(b) is not None else None for t in tasks]

    last = []  # per job: bind -> its last task's process start (the gang is complete)
    for r in recs:
        v = [t["process_start"] - t["bound"] for t in r if t.get("process_start")]
        if v:
            last.append(max(v))
    return {
        "tasks": len(tasks),
        "bind_to_process": pstats(d("bound", "process_start")),
        "bind_to_supervisor_popen": pstats(d("bound", "popen")),
        "bind_to_reported": pstats(d("bound", "reported")),
        "bind_to_last_task_of_gang": pstats(last),
        "split": {
            "cycle (bound_at -> cycle committed)": pstats(d("bound", "commit")),
            "poll wait (commit -> assignments answer listing the task)": pstats(d("commit", "fetched")),
            "agent (answer -> supervisor Popen returned)": pstats(d("fetched", "popen")),
            "supervisor (Popen -> task process start)": pstats(d("popen", "process_start")),
            "report (task process start -> server received started)": pstats(d("process_start", "reported")),
        },
        "clock_check (supervisor /proc start - Popen return; <= 0 and > -0.02 expected)":
            pstats(d("popen", "supervisor_start")),
        "stop_gone": pstats([s["gone_s"] for s in stops]),
        "stop_reaped": pstats([s["reaped_s"] for s in stops]),
        "stop_sigterm_first": pstats([s["sigterm_first_s"] for s in stops]),
        "stop_sigterm_last": pstats([s["sigterm_last_s"] for s in stops]),
        "stop_job_final": pstats([s["job_final_s"] for s in stops]),
        "stop_stray_processes": sum(s["stray"] for s in stops),
    }


# ------------------------------------------------------------------------------------------------------- main
def quiet_logs() -> None:
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("gpuplatform.scheduling.store", "gpuplatform.scheduling.tasks", "django.server"):
        logging.getLogger(name).setLevel(logging.ERROR)
    log.setLevel(logging.WARNING)


def _django_already_configured() -> bool:
    if "django" not in sys.modules:
        return False
    from django.apps import apps

    return apps.ready


def run(args, argv) -> dict:
    mode = "quick" if args.quick else "full"
    report: dict = {"machine": C.machine(), "mode": mode, "loadavg_start": os.getloadavg(),
                    "command": "python benchmarks/execution_latency.py " + " ".join(argv)}
    tmp = Path(tempfile.mkdtemp(prefix="gpuplatform-exec-bench-"))
    vendor, url = choose_database(args.db, tmp)
    os.environ["REDIS_URL"] = ""  # no broker: the in-process loop runs the cycles, as in the local mode
    import _db

    _db.use_database(url)  # also when another benchmark set Django up earlier in this process (benchmarks/run.py)
    quiet_logs()
    report["database"] = vendor
    bench = Bench(args, tmp)
    old = {}
    if threading.current_thread() is threading.main_thread():
        def _term(signum, frame):
            raise KeyboardInterrupt
        for sig in (signal.SIGTERM, signal.SIGINT):  # (SIGINT too: a shell may start us with it ignored)
            old[sig] = signal.signal(sig, _term)
    ok = interrupted = False
    t_all = time.monotonic()
    phases = report["phases_end_s"] = {}
    try:
        bench.setup()
        bench.start_server()
        bench.start_loop()
        print(f"execution latency ({mode}) on {vendor}, web server {bench.api}, agents in {bench.root}", flush=True)
        polls = [1.0, 0.2]
        phases["set-up"] = time.monotonic() - t_all
        agents8 = bench.start_agents(8, 8, "bench", poll=polls[0])
        phases["8 agents up"] = time.monotonic() - t_all
        # what the agents do with the server's default poll_seconds (settings.AGENT_POLL_SECONDS) although
        # they were started with --poll 1.0, as the local mode starts them
        from django.conf import settings

        default_poll = settings.AGENT_POLL_SECONDS
        t = time.time()
        time.sleep(4.5 if args.quick else 10.0)
        report["default_server_poll"] = {"AGENT_POLL_SECONDS": default_poll, "agent_flag_poll": polls[0],
                                         "observed": bench.tap.intervals(t, time.time())}
        phases["default poll check"] = time.monotonic() - t_all
        o = report["default_server_poll"]["observed"]["pooled"]
        print(f"  agents started with --poll {polls[0]:g}, server AGENT_POLL_SECONDS {default_poll:g}: observed "
              f"poll gap median {o.get('median', float('nan')):.2f} s", flush=True)
        if args.quick:
            sizes, ignore = {1: 1, 8: 1, 64: 1}, 1
        else:
            sizes, ignore = {1: args.reps1, 8: args.reps8, 64: args.reps64}, args.reps_ignore
        report["latency"] = {}
        for i, poll in enumerate(polls):
            report["latency"][str(poll)] = bench.latency(poll, sizes, ignore if (i == 0 or not args.quick) else 0)
            phases[f"latency poll {poll:g}"] = time.monotonic() - t_all
        report["footprint"] = {}
        window = 6.0 if args.quick else args.window
        for poll in ([polls[0]] if args.quick else polls):
            report["footprint"][f"8x8 poll {poll:g}"] = bench.footprint(agents8, "8 agents x 8 tasks", window, poll)
            phases[f"footprint 8x8 poll {poll:g}"] = time.monotonic() - t_all
        if not args.quick:
            bench.stop_agents(agents8)
            bench.cordon(agents8)
            agents64 = bench.start_agents(1, 64, "bench64", poll=polls[0])
            for poll in polls:
                report["footprint"][f"1x64 poll {poll:g}"] = bench.footprint(agents64, "1 agent x 64 tasks", window,
                                                                             poll)
                phases[f"footprint 1x64 poll {poll:g}"] = time.monotonic() - t_all
        ok = True
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        main_thread = threading.current_thread() is threading.main_thread()
        mask = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)} if main_thread \
            else {}
        try:
            report["teardown"] = td = bench.teardown()
            print(f"  torn down: {td['leftover_killed']} leftover process(es) killed, agents alive "
                  f"{td['agents_alive']}, web thread alive {td.get('web_thread_alive')}, cycle thread alive "
                  f"{td.get('cycle_thread_alive')}", flush=True)
            from django.db import connections

            connections.close_all()
            drop_database(vendor, url)
        finally:
            for sig, h in mask.items():
                signal.signal(sig, h)
            for sig, h in old.items():
                signal.signal(sig, h)
            if (ok or interrupted) and not args.keep_dirs:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                print(f"agent logs and task directories kept in {tmp}", flush=True)
    report["wall_seconds"] = time.monotonic() - t_all
    report["loadavg_end"] = os.getloadavg()
    print(f"  {report['wall_seconds']:.0f} s in all", flush=True)
    return report


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, a 10 s footprint window (< ~60 s)")
    ap.add_argument("--db", choices=["auto", "postgres", "sqlite"], default="auto",
                    help="auto: PostgreSQL when DATABASE_URL is a postgres:// URL, else a scratch SQLite file")
    ap.add_argument("--reps1", type=int, default=20, help="repetitions of a 1-task gang per poll (full)")
    ap.add_argument("--reps8", type=int, default=8, help="repetitions of an 8-task gang per poll (full)")
    ap.add_argument("--reps64", type=int, default=5, help="repetitions of a 64-task gang per poll (full)")
    ap.add_argument("--reps-ignore", type=int, default=5, help="repetitions of the SIGTERM-ignoring task per poll")
    ap.add_argument("--window", type=float, default=60.0, help="footprint sampling window, seconds (full)")
    ap.add_argument("--grace", type=int, default=3, help="the queue's preemption_grace_seconds")
    ap.add_argument("--keep-dirs", action="store_true", help="keep the agents' logs and task directories")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full"
    if _django_already_configured():
        # benchmarks/run.py after a benchmark that set Django up for its own database: run in a fresh process
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], cwd=C.ROOT)
        path = C.RESULTS_DIR / f"execution_latency_{mode}.json"
        if out.returncode != 0:
            raise RuntimeError(f"execution_latency.py exited with status {out.returncode}")
        return json.loads(path.read_text())
    report = run(args, argv)
    for lat in report.get("latency", {}).values():  # per task, compact: seconds after the job's bound_at
        for size in lat["sizes"].values():
            size["task_columns"] = ",".join(["job rep", "task", "node", "bound_at (epoch s)"] + [
                f"{c} - bound_at (s)" for c in TASK_TIMES])
            size["task_rows"] = [",".join([str(i), str(t["task"]), t["node"], f"{t['bound']:.4f}"] + [
                "" if t.get(c) is None else f"{t[c] - t['bound']:.4f}" for c in TASK_TIMES])
                for i, job in enumerate(size.pop("tasks")) for t in job]
    path = C.save(f"execution_latency_{mode}", report)
    print(f"figures written to {path.relative_to(C.ROOT)}", flush=True)
    return report


if __name__ == "__main__":
    main()
