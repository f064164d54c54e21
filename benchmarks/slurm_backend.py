"""The Slurm backend (docs/slurm.md) against the node agent, on the same two-node loopback setup, and its cost.

    python benchmarks/slurm_backend.py [--quick] [--db auto|postgres|sqlite] [--reps N] [--poll S] [--starts N]

Needs root and Debian's munge, slurmctld, slurmd, slurm-client (`make slurm`); without them the Slurm parts
are skipped with a note. What runs (one process, as `manage.py demo --local-agents` / `demo --slurm` run it):
the web server and the cycle loop (run_loop, wall clock, 1 s between cycles) in threads of this process,
on a scratch database (PostgreSQL `gpuplatform_slurm_bench` on DATABASE_URL's server, created and dropped
here, or a scratch SQLite file), one queue with quota 128 H200 and preemption grace 3 s.

1. Bind -> task process start, 2-task gangs (one GPU per task, `sleep 3600`), one at a time, each cancelled
   once both tasks run:
   - agent: 2 real `manage.py gpu_agent` processes x 2 GPUs (benchmarks/execution_latency.py's Bench; the
     agents poll every --poll seconds); process start = the supervisor's child's /proc start time;
   - Slurm: the agents are stopped and their nodes cordoned; a private Slurm (gpuplatform.slurm.local, two
     `slurmd -N` x 2 GPU GRES) and the backend's loop (SlurmBackend.sync every --poll seconds, in a thread);
     process start = /proc start time of the task's command (its pid from the launcher's started file).
   Both: from the job's bound_at (the cycle's clock, taken when the cycle begins); also bind -> "started"
   applied (Task.started_at) and, per gang, bind -> its last task's process.
2. Submissions from one cycle at --starts starts: --starts one-task gangs bound by one apply_result onto
   --starts/2 platform nodes of executor slurm (2 GPUs each), then one backend round submits them all
   through a counting runner that answers sbatch at once (the backend's own cost per job: assignments,
   script, launcher file, the Job row, the Event), and a second round with all of them pending in Slurm
   (the steady cost of a round). Real `sbatch` latency to the local slurmctld is measured separately (50
   submissions of a 2-node gang's script, cancelled afterwards): gangs per second through Slurm = 1 /
   (backend cost per job + sbatch median).
3. The cycle's added cost per Slurm job: apply_result of the same --starts bindings onto executor-slurm
   nodes and onto executor-agent nodes (the only cycle code that looks at the executor is one membership
   test); the difference per job, and the backend's per-job cost from part 2 (the work Slurm jobs add,
   done outside the cycle).

Figures: benchmarks/results/slurm_backend_<mode>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import _common as C
import execution_latency as E

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_start(pid: int | None) -> float | None:
    st = E.stat(pid) if pid else None
    return None if st is None else st["start"] / CLK_TCK + E.boot_offset()


class CountingRunner:
    """The Slurm CLI runner for part 2: sbatch answers a new id at once, squeue lists every submitted job
    PENDING, sinfo lists no node (the platform's nodes are its own here)."""

    def __init__(self):
        self.jobs: dict[str, str] = {}

    def __call__(self, argv, input=None):
        from gpuplatform.slurm.cli import Result

        if argv[0] == "sbatch":
            jid = str(len(self.jobs) + 1)
            name = next(line.split("=", 1)[1] for line in input.splitlines() if line.startswith("#SBATCH --job-name"))
            self.jobs[jid] = name
            return Result(0, jid + "\n")
        if argv[0] == "squeue":
            return Result(0, json.dumps({"errors": [], "jobs": [
                {"job_id": int(j), "name": n, "job_state": "PENDING", "state_reason": "Priority", "nodes": "",
                 "gres_detail": []} for j, n in self.jobs.items()]}))
        if argv[0] == "sinfo":
            return Result(0, json.dumps({"errors": [], "nodes": []}))
        return Result(0, "")


def slurm_latency(bench, args, flavor: str, tmp: Path) -> dict:
    from django.db import close_old_connections

    from gpuplatform import services
    from gpuplatform.models import Job, Node, Task
    from gpuplatform.slurm.backend import SlurmBackend
    from gpuplatform.slurm.cli import SlurmCLI, SubprocessRunner
    from gpuplatform.slurm.local import LocalSlurm

    local = LocalSlurm(tmp / "slurm", nodes=("gpn1", "gpn2"), gpus=2, cpus=4)
    local.start()
    backend = SlurmBackend(SlurmCLI(SubprocessRunner(str(local.conf)), partition="gpuplatform"),
                           output_dir=str(tmp / "slurm-out"), jobcomp_file=str(local.jobcomp), flavor=flavor,
                           start_timeout=120)
    stop = threading.Event()
    rounds: list[float] = []

    def drive():
        while not stop.is_set():
            t = time.perf_counter()
            try:
                backend.sync()
            except Exception as exc:  # noqa: BLE001 - measured loop keeps going
                print(f"  backend round failed: {exc}", flush=True)
            rounds.append(time.perf_counter() - t)
            close_old_connections()
            stop.wait(args.poll)

    backend.sync_nodes(__import__("gpuplatform.clock", fromlist=["now"]).now())
    thread = threading.Thread(target=drive, name="bench-slurm", daemon=True)
    thread.start()
    recs, stops = [], []
    sbatch = []
    try:
        for i in range(args.reps):
            time.sleep(__import__("random").uniform(0.0, 1.0))
            job = bench.submit(2, E.SLEEP, f"slurm-{i}")
            deadline = time.monotonic() + 120
            while Task.objects.filter(job=job, state="running").count() < 2:
                if time.monotonic() > deadline:
                    j = Job.objects.get(pk=job.pk)
                    raise RuntimeError(f"job {job.pk} did not run through Slurm: state {j.state}, pending reason "
                                       f"{j.pending_reason!r}, slurm {j.slurm}, tasks "
                                       f"{list(Task.objects.filter(job=job).values_list('state', 'node__name'))}, "
                                       f"last backend rounds {rounds[-3:]}, squeue "
                                       f"{local.run('squeue', '-h', '-o', '%i %j %T %r').stdout[-500:]}, nodes "
                                       f"{list(Node.objects.filter(executor='slurm').values_list('name', 'state', 'health_reason'))}"
                                       f", sinfo {local.run('sinfo', '-h', '-N', '-o', '%N %T %E').stdout}")
                time.sleep(0.05)
            time.sleep(0.3)
            job = Job.objects.get(pk=job.pk)
            d = Path(job.slurm["dir"])
            rows = []
            for tid, started_at in Task.objects.filter(job=job).order_by("index").values_list("id", "started_at"):
                pid = None
                try:
                    pid = int((d / f"task-{tid}.started").read_text())
                except (OSError, ValueError):
                    pass
                rows.append({"task": tid, "bound": job.bound_at.timestamp(), "process_start": process_start(pid),
                             "reported": started_at.timestamp() if started_at else None, "pid": pid})
            recs.append(rows)
            pids = [(r["pid"], E.stat(r["pid"])["start"]) for r in rows if r["pid"] and E.stat(r["pid"])]
            t0 = time.time()
            services.cancel_job(job, reason="benchmark")
            gone = None
            while time.time() - t0 < 60:
                if not any(E.alive(*p) for p in pids):
                    gone = time.time() - t0
                    break
                time.sleep(0.02)
            final = bench.wait_final(job)
            stops.append({"gone_s": gone, "job_final_s": (final - t0) if final else None})
        # real sbatch latency against this slurmctld: a 2-node gang's script shape, cancelled right after
        script = (tmp / "slurm-out").glob("job-*/attempt-*/batch.sh")
        script = next(iter(script)).read_text()
        runner = SubprocessRunner(str(local.conf))
        ids = []
        for i in range(50 if not args.quick else 10):
            s = script.replace("#SBATCH --job-name=", f"#SBATCH --job-name=bench{i}-")
            t = time.perf_counter()
            r = runner(["sbatch", "--parsable", "--hold"], s)
            sbatch.append(time.perf_counter() - t)
            ids.append(r.stdout.strip())
        runner(["scancel", *[i for i in ids if i]])
    finally:
        stop.set()
        thread.join(timeout=30)
        local.stop()

    def d(a, b):
        return [t[b] - t[a] for r in recs for t in r if t.get(a) is not None and t.get(b) is not None]

    last = [max(t["process_start"] - t["bound"] for t in r if t.get("process_start")) for r in recs
            if any(t.get("process_start") for t in r)]
    return {"poll_seconds": args.poll, "gangs": len(recs), "tasks": sum(len(r) for r in recs),
            "bind_to_process": E.pstats(d("bound", "process_start")),
            "bind_to_reported": E.pstats(d("bound", "reported")),
            "bind_to_last_task_of_gang": E.pstats(last),
            "stop_gone": E.pstats([s["gone_s"] for s in stops]),
            "stop_job_final": E.pstats([s["job_final_s"] for s in stops]),
            "backend_round_s": E.pstats(rounds), "sbatch_s": E.pstats(sbatch)}


def agent_latency(bench, args) -> tuple[dict, list]:
    agents = bench.start_agents(2, 2, "agent", poll=args.poll)
    bench.set_poll(args.poll)
    recs, stops = [], []
    for i in range(args.reps):
        r, s = bench.latency_rep(2, E.SLEEP, f"agent-{i}")
        recs.append(r)
        stops.append(s)
    s = E.summarize(recs, stops)
    out = {"poll_seconds": args.poll, "gangs": len(recs), "tasks": s["tasks"],
           "bind_to_process": s["bind_to_process"], "bind_to_reported": s["bind_to_reported"],
           "bind_to_last_task_of_gang": s["bind_to_last_task_of_gang"], "stop_gone": s["stop_gone"],
           "stop_job_final": s["stop_job_final"]}
    return out, agents


def starts(bench, args, flavor: str, tmp: Path) -> dict:
    """Parts 2 and 3."""
    from django.db import transaction

    from gpuplatform import clock, services
    from gpuplatform.models import Job, Node, SchedulerCycle, Task
    from gpuplatform.scheduling import store
    from gpuplatform.slurm.backend import SlurmBackend
    from gpuplatform.slurm.cli import SlurmCLI
    from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

    n = args.starts
    out = {"starts": n}
    names = {}
    for executor in ("slurm", "agent"):
        names[executor] = [f"{executor}-sim-{i}" for i in range(n // 2)]
        for name in names[executor]:
            services.register_node(name, flavor=flavor, gpus=[{"index": 0}, {"index": 1}], executor=executor)
    for executor in ("slurm", "agent"):
        jobs = []
        with transaction.atomic():
            for i in range(n):
                jobs.append(services.submit_job(team=bench.team, queue=bench.queue, name=f"{executor}-{i}",
                                                command=E.SLEEP, roles=[{"name": "w", "tasks": 1, "gpus_per_task": 1}]))
        bindings = [Binding(j.pk, (TaskPlacement("w", 0, names[executor][i // 2], (i % 2,)),), "", 0)
                    for i, j in enumerate(jobs)]
        t = time.perf_counter()
        stats = store.apply_result(CycleResult(bindings=bindings), clock=clock.now(),
                                   cycle_number=SchedulerCycle.objects.count() + 1)
        out[f"apply_{executor}_s"] = time.perf_counter() - t
        out[f"binds_{executor}"] = stats.binds
        if executor == "slurm":
            runner = CountingRunner()
            backend = SlurmBackend(SlurmCLI(runner, partition="gpuplatform"), output_dir=str(tmp / "starts"),
                                   jobcomp_file="", start_timeout=3600)
            t = time.perf_counter()
            r = backend.sync()
            out["backend_first_round_s"] = time.perf_counter() - t
            out["submitted"] = len(r.submitted)
            t = time.perf_counter()
            r2 = backend.sync()
            out["backend_steady_round_s"] = time.perf_counter() - t
            out["steady_round_submitted"] = len(r2.submitted)
    for executor in ("slurm", "agent"):
        for node in Node.objects.filter(name__in=names[executor], state="ready"):
            services.cordon_node(node, reason="benchmark: done")
    out["backend_per_job_ms"] = 1000 * out["backend_first_round_s"] / max(1, out["submitted"])
    out["apply_added_per_job_ms"] = 1000 * (out["apply_slurm_s"] - out["apply_agent_s"]) / n
    return out


def run(args, argv) -> dict:
    mode = "quick" if args.quick else "full"
    report: dict = {"machine": C.machine(), "mode": mode, "loadavg_start": os.getloadavg(),
                    "command": "python benchmarks/slurm_backend.py " + " ".join(argv)}
    tmp = Path(tempfile.mkdtemp(prefix="gpuplatform-slurm-bench-"))
    E.SCRATCH_PG = "gpuplatform_slurm_bench"
    vendor, url = E.choose_database(args.db, tmp)
    os.environ["DATABASE_URL"] = url
    os.environ["REDIS_URL"] = ""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    import django

    django.setup()
    E.quiet_logs()
    report["database"] = vendor
    bench = E.Bench(SimpleNamespace(grace=3, quick=args.quick), tmp)
    if threading.current_thread() is threading.main_thread():
        def _term(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, _term)
    t_all = time.monotonic()
    try:
        bench.setup()
        bench.start_server()
        bench.start_loop()
        from gpuplatform.slurm.local import slurm_installed

        report["agent"], agents = agent_latency(bench, args)
        a = report["agent"]["bind_to_process"]
        print(f"  agent: bind -> process median {a['median']:.3f} s, p99 {a['p99']:.3f} s ({a['n']} tasks)", flush=True)
        from gpuplatform.models import Node

        flavor = Node.objects.filter(executor="agent").values_list("flavor", flat=True).first()
        bench.stop_agents(agents)
        bench.cordon(agents)
        missing = slurm_installed()
        if missing or os.geteuid() != 0:
            report["slurm"] = {"skipped": f"missing {missing}" if missing else "needs root"}
            print(f"  Slurm skipped: {report['slurm']['skipped']}", flush=True)
        else:
            report["slurm"] = slurm_latency(bench, args, flavor, tmp)
            s = report["slurm"]["bind_to_process"]
            print(f"  Slurm: bind -> process median {s['median']:.3f} s, p99 {s['p99']:.3f} s ({s['n']} tasks); "
                  f"sbatch median {report['slurm']['sbatch_s']['median'] * 1000:.1f} ms", flush=True)
        bench.stop_loop.set()  # parts 2-3 bind by hand: no cycle of its own may race them
        bench.loop_thread.join(timeout=30)
        report["starts"] = st = starts(bench, args, flavor, tmp)
        if "sbatch_s" in report.get("slurm", {}):
            st["gangs_per_second_with_real_sbatch"] = 1.0 / (st["backend_per_job_ms"] / 1000
                                                            + report["slurm"]["sbatch_s"]["median"])
        print(f"  {st['starts']} starts: backend round {st['backend_first_round_s']:.2f} s "
              f"({st['backend_per_job_ms']:.2f} ms per job, {st['submitted']} submitted), steady round "
              f"{st['backend_steady_round_s']:.2f} s; apply_result slurm {st['apply_slurm_s']:.2f} s vs agent "
              f"{st['apply_agent_s']:.2f} s", flush=True)
    finally:
        report["teardown"] = bench.teardown()
        from django.db import connections

        connections.close_all()
        E.drop_database(vendor, url)
        shutil.rmtree(tmp, ignore_errors=True)
    report["wall_seconds"] = time.monotonic() - t_all
    report["loadavg_end"] = os.getloadavg()
    return report


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 gangs per executor, 200 starts, 10 sbatch calls")
    ap.add_argument("--db", choices=["auto", "postgres", "sqlite"], default="auto")
    ap.add_argument("--reps", type=int, default=20, help="2-task gangs per executor (full)")
    ap.add_argument("--poll", type=float, default=1.0, help="agent poll and backend round interval, seconds")
    ap.add_argument("--starts", type=int, default=1000, help="gangs bound by one cycle for parts 2-3 (full)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.starts = min(args.reps, 5), min(args.starts, 200)
    report = run(args, argv)
    path = C.save(f"slurm_backend_{'quick' if args.quick else 'full'}", report)
    print(f"figures written to {path.relative_to(C.ROOT)} ({report['wall_seconds']:.0f} s)", flush=True)
    return report


if __name__ == "__main__":
    main()
