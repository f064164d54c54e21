#!/usr/bin/env python3
"""Slurm (Debian slurm-wlm 22.05) vs our engine on the same GPU cluster and the same job backlog.

    .venv/bin/python benchmarks/peers/slurm_vs_ours.py            # 128 nodes x 8 GPUs, 1,200 jobs
    .venv/bin/python benchmarks/peers/slurm_vs_ours.py --full     # 512 nodes x 8 GPUs, 4,800 jobs
    options: --sched fifo,backfill --horizon MIN --nodes N --jobs J --seed S --slurm-defaults --keep
             --skip-slurm

How Slurm runs here without real nodes: every node is a State=CLOUD (power-saving) node whose
ResumeProgram is /bin/true and whose ResumeTimeout is two hours, so slurmctld makes its real scheduling
decision (select/cons_tres + topology/tree, gres/gpu counts, and sched/builtin or sched/backfill) and the
job sits in CONFIGURING with its node list while the "node boots" -- no slurmd, no slurmstepd, nothing
launched. (Multiple slurmd with -N also works with this build, but every running job then costs a ~6 MiB
slurmstepd; the Debian slurm-wlm-emulator front-end build cannot parse FrontendName: unusable.)
Gres: the Debian 22.05.8 build ignores Gres=gpu:8 on NodeName lines here, so the script sets it with
`scontrol update nodename=... gres=gpu:8` after start-up (verified: jobs then get gres:gpu).

Input (same for both): N nodes x 8 GPUs, leaf switches of 16 nodes (tier 2) under one spine (tier 3),
each node its own tier-1 domain (Philly-like); J jobs sampled (seeded) from the real Philly trace
(data/philly/philly_jobs_pollux.csv: num_gpus, duration; --big-share of them, default 5 %, from its
rows above 8 GPUs so multi-node placement shows up), <= 8 GPUs -> one task on one node,
> 8 GPUs -> ceil(g/8) tasks x 8 GPUs (one whole node each); time limit = the job's trace duration rounded
up to the minute (Slurm --time, ours JobInfo.time_limit) so both backfills can plan; one queue /
partition, FIFO by submit order (Slurm: --priority = 1,000,000 - index, whatever order the 4 parallel
sbatch processes deliver them in), empty cluster, backlog ~2.9x capacity.

Each policy (--sched) is run in two steps of the same simulated clock, both schedulers seeing the same
events:

- t = 0: the backlog is released on the empty cluster (Slurm: partition DOWN while submitting, then UP;
  ours: one `scheduler.core.run_cycle` on the equivalent Snapshot, median of 3).
- t = horizon (--horizon minutes, default 60): every job started at t = 0 whose trace duration is at most
  the horizon has ended; the others run on with horizon minutes of their limit spent. Slurm: partition
  DOWN, those jobs scancel'ed, `scontrol update jobid=... TimeLimit-=horizon` on the others (they all
  started at the same instant, so Slurm's view of each expected end is then the simulated one), sdiag
  reset, partition UP. Ours: one cycle at now = t0 + horizon with the survivors running where our t = 0
  cycle put them. Each scheduler carries its own state forward, as in a real run.

Policies: "fifo" = Slurm's sched/builtin (strict priority order: nothing behind a job that cannot start
starts) vs ours with CycleConfig(backfill=False) (no reservation; the product has no strict FIFO: a job
that cannot start never blocks the jobs behind it, so this is first fit in FIFO order). "backfill" =
Slurm's sched/backfill (bf_window covering the longest time limit up to Slurm's 30-day maximum,
bf_resolution 60 s, bf_max_job_test 100,000, bf_continue, bf_interval 2 s) vs ours with
CycleConfig(backfill=True) (EASY: one reservation for the first job that cannot start, computed from the
running jobs' start + time limit; later jobs may use its GPUs only if they end before it starts).

Both Slurm policies: default_queue_depth 100,000, sched_interval 2 s and max_sched_time 60 s with
MessageTimeout 120 s (the main scheduler's pass is otherwise cut after 2 s: sched/builtin then started 51 of
300 jobs on a cluster with 23 whole nodes free and waited for the next pass). Slurm takes max_sched_time only
up to MessageTimeout / 2 (default 10 s / 2): above it, it logs "Invalid max_sched_time" and falls back to
min(MessageTimeout / 2, 2 s) (src/slurmctld/job_scheduler.c), which the runs before session 13 did: their
passes were still cut at 2 s. Slurm's decisions are counted once it is quiet: no new
start for 8 s and two passes of the scheduler that starts jobs (main under sched/builtin, backfill under
sched/backfill) completed since the last start. CPU: slurmctld's user + system CPU (/proc, all threads)
from partition UP to its last start; ours: process CPU of the cycle. The machine is shared: compare ratios
inside one run, not absolute times. The load average is printed.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

WORK = Path(os.environ.get("PEERS_WORK") or Path(tempfile.gettempdir()) / "peers-work")
ROOT = Path(__file__).resolve().parents[2]
GPN = 8          # GPUs per node
LEAF = 16        # nodes per leaf switch
PORT = 16817
T0 = 1e6         # our cluster clock at the backlog's release (seconds)
BF_WINDOW_MAX = 43200  # minutes: Slurm's largest bf_window (30 days)


def slurm_missing() -> str | None:
    """What Slurm still needs on this machine, or None when slurmctld, sbatch, scontrol, squeue, scancel
    and sdiag are all there."""
    if not (shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()):
        return "Slurm not installed: apt-get install -y --no-install-recommends slurmctld slurm-client"
    for tool in ("sbatch", "scontrol", "squeue", "scancel", "sdiag"):
        if not shutil.which(tool):
            return f"{tool} not found: apt-get install -y --no-install-recommends slurm-client"
    return None


# ---------------------------------------------------------------- the common input
def philly_rows(product: Path):
    with open(product / "data" / "philly" / "philly_jobs_pollux.csv", newline="") as f:
        return [(int(r["num_gpus"]), float(r["duration"])) for r in csv.DictReader(f)]


def make_jobs(product: Path, nodes: int, n_jobs: int, seed: int, big_share: float = 0.0):
    """Seeded sample of Philly rows; big_share of the jobs drawn from the rows asking > 8 GPUs (0.8 % of
    the trace) so that multi-node placement / topology shows up in a small sample. Each job: index i,
    tasks x per GPUs, trace duration (s), time limit in whole minutes (>= duration)."""
    rng = random.Random(seed)
    rows = philly_rows(product)
    big = [r for r in rows if r[0] > GPN]
    cap = nodes * GPN
    jobs = []
    for i in range(n_jobs):
        g, d = rng.choice(big if rng.random() < big_share else rows)
        g = min(g, cap // 2)
        tasks, per = (1, g) if g <= GPN else (-(-g // GPN), GPN)
        jobs.append({"i": i, "tasks": tasks, "per": per, "gpus": tasks * per, "duration": d,
                     "minutes": max(1, int(-(-d // 60)))})
    return jobs


def node_name(k: int) -> str:
    return f"gn{k + 1:04d}"


def leaf_of(name: str) -> int:
    return (int(name[2:]) - 1) // LEAF


def ended_by(job: dict, horizon_min: int) -> bool:
    """Whether a job started at t = 0 has ended at t = horizon (its trace duration is at most the horizon)."""
    return job["duration"] <= 60.0 * horizon_min


# ---------------------------------------------------------------- quality metrics (same code for both)
def quality(nodes: int, placements: dict, jobs: list, running: dict | None = None) -> dict:
    """placements: job index -> list of (node name, gpus on it), the jobs started by this decision;
    running: the same for jobs already running before it (they count in the GPUs allocated)."""
    used = {node_name(k): 0 for k in range(nodes)}
    for pl in list(placements.values()) + list((running or {}).values()):
        for n, g in pl:
            used[n] += g
    multi = multi_leaf1 = 0
    for i, pl in placements.items():
        ns = {n for n, _ in pl}
        if len(ns) > 1:
            multi += 1
            multi_leaf1 += len({leaf_of(n) for n in ns}) == 1
    cap = nodes * GPN
    alloc = sum(used.values())
    free = cap - alloc
    whole_free = sum(1 for v in used.values() if v == 0)
    return {"jobs_started": len(placements), "gpus_started": sum(jobs[i]["gpus"] for i in placements),
            "gpus_allocated": alloc, "allocation": alloc / cap,
            "multi_node_started": multi, "multi_node_one_leaf": multi_leaf1,
            "whole_free_nodes": whole_free,
            "started_1gpu": sum(1 for i in placements if jobs[i]["gpus"] == 1),
            "started_2to8": sum(1 for i in placements if 1 < jobs[i]["gpus"] <= GPN),
            "started_gt8": sum(1 for i in placements if jobs[i]["gpus"] > GPN),
            "free_gpus_on_partial_nodes": free - whole_free * GPN}


def fifo_prefix(placements: dict, n_jobs: int) -> int:
    """How many jobs from the head of the list started with no gap (what strict FIFO starts)."""
    return next((k for k in range(n_jobs) if k not in placements), n_jobs)


# ---------------------------------------------------------------- ours
def run_ours(nodes: int, jobs: list, backfill: bool, horizon_min: int, repeats: int = 3) -> dict:
    """Our engine at t = 0 and at t = horizon (module docstring). CPU and wall: medians of `repeats` cycles."""
    from scheduler.core import CycleConfig, run_cycle
    from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot

    leaves = -(-nodes // LEAF)
    domains = [DomainInfo("spine", 3)] + [DomainInfo(f"leaf{l}", 2, "spine") for l in range(leaves)]
    domains += [DomainInfo(f"m-{node_name(k)}", 1, f"leaf{k // LEAF}") for k in range(nodes)]
    domains = tuple(domains)
    node_infos = tuple(NodeInfo(name=node_name(k), flavor="gpu", gpus=GPN, domain=f"m-{node_name(k)}")
                       for k in range(nodes))
    cap = nodes * GPN
    queues = (QueueInfo("q", quotas={"gpu": QuotaInfo(guarantee=cap, quota=cap, limit=cap)}),)
    # submitted in list order within the second before the release: at t = 0 no job has waited (no drain
    # reservation, CycleConfig.starvation_seconds); at t = horizon every one still pending has
    infos = [JobInfo(id=f"j{j['i']}", queue="q", roles=(RoleInfo("worker", j["tasks"], j["per"], j["tasks"]),),
                     submit_time=T0 - 1.0 + j["i"] / len(jobs), time_limit=60.0 * j["minutes"], name=f"j{j['i']}")
             for j in jobs]
    config = CycleConfig(backfill=backfill)
    run_cycle(Snapshot(nodes=node_infos[:1], domains=domains), config)  # warm-up (imports)

    def decide(snap):
        walls, cpus, result = [], [], None
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            result = run_cycle(snap, config)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        return result, statistics.median(walls), statistics.median(cpus)

    def placements_of(result):
        out, tasks = {}, {}
        for b in result.bindings:
            i = int(str(b.job_id)[1:])
            per = {}
            for t in b.tasks:
                per[t.node] = per.get(t.node, 0) + len(t.gpus)
            out[i], tasks[i] = list(per.items()), b.tasks
        return out, tasks

    first, wall0, cpu0 = decide(Snapshot(nodes=node_infos, domains=domains, queues=queues, jobs=tuple(infos), now=T0))
    start0, tasks0 = placements_of(first)
    # t = horizon: the jobs of t = 0 still running where they were put, with their start and limit
    survivors = {i: pl for i, pl in start0.items() if not ended_by(jobs[i], horizon_min)}
    state = [replace(infos[i], state="running", placement=tasks0[i], start_time=T0) if i in survivors else infos[i]
             for i in range(len(jobs)) if i in survivors or i not in start0]
    busy: dict[str, set] = {}  # NodeInfo.used: the GPUs live allocations hold at snapshot time
    for i in survivors:
        for t in tasks0[i]:
            busy.setdefault(t.node, set()).update(t.gpus)
    nodes_h = tuple(replace(n, used=frozenset(busy.get(n.name, ()))) for n in node_infos)
    second, wall1, cpu1 = decide(Snapshot(nodes=nodes_h, domains=domains, queues=queues, jobs=tuple(state),
                                          now=T0 + 60.0 * horizon_min))
    start1, _ = placements_of(second)
    return {"t0": {"placements": start0, "wall_s": wall0, "cpu_s": cpu0,
                   "backfilled": sum(1 for b in first.bindings if b.rule == "backfill")},
            "th": {"placements": start1, "running": survivors, "wall_s": wall1, "cpu_s": cpu1,
                   "backfilled": sum(1 for b in second.bindings if b.rule == "backfill"),
                   "estimated_start": {str(k): v - T0 for k, v in getattr(second, "estimated_start", {}).items()}}}


# ---------------------------------------------------------------- Slurm
def sh(cmd, env, check=True, **kw):
    return subprocess.run(cmd, env=env, check=check, capture_output=True, text=True, **kw)


def expand(nodelist: str) -> list[str]:
    out = []
    for m in re.finditer(r"([A-Za-z]+)(\[[^\]]*\]|\d+)", nodelist):
        prefix, body = m.group(1), m.group(2)
        if body.startswith("["):
            for part in body[1:-1].split(","):
                if "-" in part:
                    a, b = part.split("-")
                    out += [f"{prefix}{k:0{len(a)}d}" for k in range(int(a), int(b) + 1)]
                else:
                    out.append(prefix + part)
        else:
            out.append(prefix + body)
    return out


def write_conf(d: Path, nodes: int, sched: str, bf_window: int, defaults: bool) -> Path:
    for sub in ("state", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    last = node_name(nodes - 1)
    params = "" if defaults else ("SchedulerParameters=default_queue_depth=100000,sched_interval=2,max_sched_time=60,bf_interval=2,"
                                  f"bf_max_job_test=100000,bf_continue,bf_window={bf_window},bf_resolution=60\n")
    # every node at 127.0.0.1 on a port where nothing listens: the RPCs of a cancel (KILL_JOB to a node still
    # "booting") are refused at once, where an unresolvable name kept slurmctld retrying and stalled it
    node_lines = "\n".join(f"NodeName={node_name(k)} NodeAddr=127.0.0.1 Port={PORT + 1} CPUs=256 RealMemory=100000 "
                           f"Gres=gpu:{GPN} State=CLOUD" for k in range(nodes))
    (d / "slurm.conf").write_text(f"""ClusterName=bench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={PORT}
SlurmdPort={PORT + 1}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldLogFile={d}/log/slurmctld.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/{'backfill' if sched == 'backfill' else 'builtin'}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PriorityType=priority/basic
GresTypes=gpu
TopologyPlugin=topology/tree
SlurmctldDebug=error
{'' if defaults else 'MessageTimeout=120'}
PrivateData=cloud
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=3600
ResumeTimeout=7200
ResumeRate=0
SuspendRate=0
MaxJobCount=200000
{params}{node_lines}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    (d / "gres.conf").write_text(f"AutoDetect=off\nNodeName=gn[0001-{last[2:]}] Name=gpu Count={GPN}\n")
    leaves = -(-nodes // LEAF)
    lines = []
    for l in range(leaves):
        a, b = l * LEAF, min(nodes, (l + 1) * LEAF) - 1
        lines.append(f"SwitchName=leaf{l} Nodes=gn[{a + 1:04d}-{b + 1:04d}]")
    lines.append(f"SwitchName=spine Switches=leaf[0-{leaves - 1}]")
    (d / "topology.conf").write_text("\n".join(lines) + "\n")
    return d / "slurm.conf"


def sdiag(env) -> dict:
    out = sh(["sdiag"], env).stdout

    def grab(section, key):
        s = out.split(section, 1)[1] if section in out else ""
        m = re.search(rf"{re.escape(key)}:?\s+(\d+)", s)
        return int(m.group(1)) if m else None
    return {"main_cycles": grab("Main schedule statistics", "Total cycles"),
            "main_mean_us": grab("Main schedule statistics", "Mean cycle"),
            "main_max_us": grab("Main schedule statistics", "Max cycle"),
            "bf_jobs": grab("Backfilling stats", "Total backfilled jobs (since last stats cycle start)"),
            "bf_cycles": grab("Backfilling stats", "Total cycles") or 0,
            "bf_last_us": grab("Backfilling stats", "Last cycle"),
            "bf_max_us": grab("Backfilling stats", "Max cycle"),
            "bf_mean_us": grab("Backfilling stats", "Mean cycle"),
            "jobs_started": int(re.search(r"Jobs started:\s+(\d+)", out).group(1))}


def in_chunks(items, n=400):
    for k in range(0, len(items), n):
        yield items[k:k + n]


def run_slurm(nodes: int, jobs: list, sched: str, horizon_min: int, defaults: bool, keep: bool) -> dict:
    """slurmctld at t = 0 and t = horizon (module docstring)."""
    need = slurm_missing()
    if need:
        raise SystemExit(need)
    bf_window = min(BF_WINDOW_MAX, max(j["minutes"] for j in jobs))
    d = WORK / "slurm" / f"run-{nodes}-{sched}"
    if d.exists():
        shutil.rmtree(d)
    conf = write_conf(d, nodes, sched, bf_window, defaults)
    env = dict(os.environ, SLURM_CONF=str(conf))
    ctld = "/usr/sbin/slurmctld" if Path("/usr/sbin/slurmctld").exists() else "slurmctld"
    sh([ctld, "-f", str(conf)], env)
    try:
        for _ in range(50):
            if sh(["scontrol", "ping"], env, check=False).stdout.count("UP"):
                break
            time.sleep(0.2)
        sh(["scontrol", "update", f"nodename=gn[0001-{node_name(nodes - 1)[2:]}]", f"gres=gpu:{GPN}"], env)
        sh(["scontrol", "update", "partitionname=gpu", "state=down"], env)

        def submit(j):
            cmd = ["sbatch", "--parsable", "-J", f"j{j['i']}", "-p", "gpu", "-N", str(j["tasks"]), "--ntasks-per-node=1",
                   f"--gres=gpu:{j['per']}", f"--time={j['minutes']}", f"--priority={1_000_000 - j['i']}", "--wrap", "sleep 1"]
            r = sh(cmd, env, check=False)
            return j["i"], r.returncode, r.stdout.strip() or r.stderr.strip()

        t0 = time.perf_counter()
        ids, failed = {}, []
        with cf.ThreadPoolExecutor(4) as ex:
            for i, rc, out in ex.map(submit, jobs):
                if rc == 0:
                    ids[int(out.split(";")[0])] = i
                else:
                    failed.append((i, out))
        submit_s = time.perf_counter() - t0
        jid_of = {i: jid for jid, i in ids.items()}
        pid = int((d / "slurmctld.pid").read_text().split()[0])
        tck = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:  # slurmctld's user + system CPU (all its threads)
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / tck

        def release() -> dict:
            """Partition UP, wait until quiet, read what runs. CPU and time from UP to the last start."""
            sh(["sdiag", "--reset"], env)
            cpu0, t_up = cpu_s(), time.perf_counter()
            sh(["scontrol", "update", "partitionname=gpu", "state=up"], env)
            cycles = "bf_cycles" if sched == "backfill" else "main_cycles"  # the pass that starts jobs
            started, last_change, cpu_at_last, cycles_at_last, series = 0, t_up, cpu0, 0, []
            settle = 8.0 if not defaults else 70.0
            while True:  # poll sdiag's counters (cheap RPC; squeue would make slurmctld pack every job)
                diag = sdiag(env)
                now = time.perf_counter()
                if diag["jobs_started"] != started:
                    started, last_change, cpu_at_last = diag["jobs_started"], now, cpu_s()
                    cycles_at_last = diag[cycles] or 0
                    series.append((round(now - t_up, 2), started))
                quiet = now - last_change > settle and (diag[cycles] or 0) >= cycles_at_last + 2
                if quiet or now - t_up > 600:
                    break
                time.sleep(0.2)
            rows = sh(["squeue", "-h", "-t", "CF,R", "-o", "%i|%N|%b"], env).stdout.splitlines()
            running = {}
            for row in rows:
                jid, nl, tres = row.split("|")
                per = int(re.search(r"gpu:(\d+)", tres).group(1))
                running[ids[int(jid)]] = [(n, per) for n in expand(nl)]
            reasons = {}
            for r in sh(["squeue", "-h", "-t", "PD", "-o", "%r"], env).stdout.split():
                reasons[r] = reasons.get(r, 0) + 1
            return {"running": running, "time_to_last_start_s": last_change - t_up, "cpu_s": cpu_at_last - cpu0,
                    "series": series[-4:], "sdiag": sdiag(env), "pending_reasons": reasons}

        first = release()
        start0 = first["running"]
        # t = horizon: end the short jobs, spend horizon minutes of the others' limits
        sh(["scontrol", "update", "partitionname=gpu", "state=down"], env)
        ended = [str(jid_of[i]) for i in start0 if ended_by(jobs[i], horizon_min)]
        going: dict[int, list[str]] = {}  # new limit (minutes) -> job ids (TimeLimit-= takes one job id only)
        for i in start0:
            if not ended_by(jobs[i], horizon_min):
                going.setdefault(jobs[i]["minutes"] - horizon_min, []).append(str(jid_of[i]))
        for chunk in in_chunks(ended):
            sh(["scancel", *chunk], env)
        for limit, jids in sorted(going.items()):
            for chunk in in_chunks(jids):
                r = sh(["scontrol", "update", f"jobid={','.join(chunk)}", f"TimeLimit={limit}"], env, check=False)
                if r.returncode:
                    raise RuntimeError(f"scontrol update TimeLimit={limit}: {r.stderr.strip()}")
        for _ in range(150):  # the cancelled jobs' completion (no slurmd: the nodes never booted)
            if not sh(["squeue", "-h", "-t", "CG", "-o", "%i"], env).stdout.strip():
                break
            time.sleep(0.2)
        second = release()
        start1 = {i: pl for i, pl in second["running"].items() if i not in start0}
        survivors = {i: pl for i, pl in second["running"].items() if i in start0}
        return {"submit_s": submit_s, "submitted": len(ids), "submit_failed": failed[:5], "n_failed": len(failed),
                "submit_rate": len(ids) / submit_s, "bf_window": bf_window,
                "t0": {**first, "placements": start0},
                "th": {**second, "placements": start1, "running": survivors, "cancelled": len(ended)},
                "dir": str(d)}
    finally:
        sh(["scontrol", "shutdown"], env, check=False)
        time.sleep(1)
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------- report
def fmt_ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def report(sched: str, nodes: int, jobs: list, horizon_min: int, ours: dict, sl: dict | None) -> None:
    n = len(jobs)
    o0, oh = ours["t0"], ours["th"]
    qo0 = quality(nodes, o0["placements"], jobs)
    qoh = quality(nodes, oh["placements"], jobs, oh["running"])
    cum_o = len(o0["placements"]) + len(oh["placements"])
    print(f"\n### {sched}: ours CycleConfig(backfill={sched == 'backfill'}) vs Slurm "
          f"sched/{'backfill' if sched == 'backfill' else 'builtin'}; horizon {horizon_min} min; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"ours : t=0 {len(o0['placements'])} started ({o0['backfilled']} by backfill rule), cycle "
          f"{o0['wall_s'] * 1000:.1f} ms wall / {o0['cpu_s'] * 1000:.1f} ms CPU; t=H {len(oh['placements'])} started "
          f"({oh['backfilled']} by backfill rule) next to {len(oh['running'])} still running, cycle "
          f"{oh['wall_s'] * 1000:.1f} ms wall / {oh['cpu_s'] * 1000:.1f} ms CPU", flush=True)
    if sl is None:
        return
    s0, shh = sl["t0"], sl["th"]
    qs0 = quality(nodes, s0["placements"], jobs)
    qsh = quality(nodes, shh["placements"], jobs, shh["running"])
    cum_s = len(s0["placements"]) + len(shh["placements"])
    for tag, ph in (("t=0", s0), ("t=H", shh)):
        dg = ph["sdiag"]
        print(f"slurm: {tag} last start {ph['time_to_last_start_s']:.2f} s after UP, {dg['jobs_started']} started; "
              f"main {dg['main_cycles']} cycles mean {dg['main_mean_us']} us max {dg['main_max_us']} us; backfill "
              f"{dg['bf_cycles']} cycles mean {dg['bf_mean_us']} us max {dg['bf_max_us']} us; last starts "
              f"{ph['series']}; pending reasons {ph['pending_reasons']}", flush=True)
    print(f"slurm: submitted {sl['submitted']} in {sl['submit_s']:.1f} s ({sl['submit_rate']:.0f} jobs/s, "
          f"{sl['n_failed']} refused {sl['submit_failed'][:1]}); bf_window {sl['bf_window']} min; "
          f"{shh['cancelled']} cancelled at t=H", flush=True)
    same0 = set(o0["placements"]) == set(s0["placements"])
    sameh = set(oh["placements"]) == set(shh["placements"])
    print(f"same jobs started: t=0 {same0} (ours only {len(set(o0['placements']) - set(s0['placements']))}, "
          f"Slurm only {len(set(s0['placements']) - set(o0['placements']))}); t=H {sameh} (ours only "
          f"{len(set(oh['placements']) - set(shh['placements']))}, Slurm only "
          f"{len(set(shh['placements']) - set(oh['placements']))})", flush=True)
    for tag, a, b in (("t=0", o0["placements"], s0["placements"]), ("t=H", oh["placements"], shh["placements"])):
        for who, only in (("ours", set(a) - set(b)), ("Slurm", set(b) - set(a))):
            if only:
                sizes = sorted((jobs[i]["gpus"] for i in only), reverse=True)
                print(f"  {tag} {who} only: {len(only)} jobs, {sum(sizes)} GPUs, sizes {sizes[:12]}"
                      f"{' ...' if len(sizes) > 12 else ''}, first {sorted(only)[:8]}", flush=True)
    print(f"\n| {sched}, {nodes} x {GPN} GPUs, {n} jobs | ours | Slurm 22.05 | ours / Slurm |\n| --- | --- | --- | --- |")
    rows = [
        ("t=0 jobs started", len(o0["placements"]), len(s0["placements"])),
        ("t=0 FIFO prefix started", fifo_prefix(o0["placements"], n), fifo_prefix(s0["placements"], n)),
        ("t=0 GPUs started", qo0["gpus_started"], qs0["gpus_started"]),
        ("t=0 jobs of 1 / 2-8 / >8 GPUs", f"{qo0['started_1gpu']} / {qo0['started_2to8']} / {qo0['started_gt8']}",
         f"{qs0['started_1gpu']} / {qs0['started_2to8']} / {qs0['started_gt8']}"),
        ("t=0 multi-node jobs inside one leaf", f"{qo0['multi_node_one_leaf']} / {qo0['multi_node_started']}",
         f"{qs0['multi_node_one_leaf']} / {qs0['multi_node_started']}"),
        ("t=0 whole free nodes left", qo0["whole_free_nodes"], qs0["whole_free_nodes"]),
        ("t=H jobs started (new)", len(oh["placements"]), len(shh["placements"])),
        ("t=H GPUs started (new)", qoh["gpus_started"], qsh["gpus_started"]),
        ("t=H multi-node jobs inside one leaf (new)", f"{qoh['multi_node_one_leaf']} / {qoh['multi_node_started']}",
         f"{qsh['multi_node_one_leaf']} / {qsh['multi_node_started']}"),
        ("t=H GPUs allocated (running + new)", qoh["gpus_allocated"], qsh["gpus_allocated"]),
        (f"jobs started by t=H={horizon_min} min", cum_o, cum_s),
    ]
    for label, a, b in rows:
        print(f"| {label} | {a} | {b} | {fmt_ratio(a, b)} |")
    print(f"| t=0 CPU (ours: cycle; Slurm: slurmctld UP -> last start) | {o0['cpu_s']:.3f} s | {s0['cpu_s']:.3f} s | "
          f"{fmt_ratio(o0['cpu_s'], s0['cpu_s'], 3)} |")
    print(f"| t=H CPU (same) | {oh['cpu_s']:.3f} s | {shh['cpu_s']:.3f} s | {fmt_ratio(oh['cpu_s'], shh['cpu_s'], 3)} |")
    print(f"| t=0 wall, released -> last start | {o0['wall_s']:.3f} s (engine only) | {s0['time_to_last_start_s']:.2f} s | "
          f"{fmt_ratio(o0['wall_s'], s0['time_to_last_start_s'], 3)} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="512 nodes / 4,800 jobs")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--big-share", type=float, default=0.05, help="share of jobs drawn from Philly's >8-GPU rows (default 0.05)")
    ap.add_argument("--sched", default="fifo,backfill", help="policies, comma-separated: fifo, backfill (default both)")
    ap.add_argument("--horizon", type=int, default=60, help="minutes of simulated time to the second decision (default 60)")
    ap.add_argument("--slurm-defaults", action="store_true", help="no SchedulerParameters (queue depth 100, bf_interval 30 s)")
    ap.add_argument("--keep", action="store_true", help="keep the Slurm state/log directory")
    ap.add_argument("--skip-slurm", action="store_true", help="run ours only")
    args = ap.parse_args(argv)
    scheds = [s for s in args.sched.split(",") if s]
    bad = [s for s in scheds if s not in ("fifo", "backfill")]
    if bad or not scheds:
        ap.error(f"--sched: unknown policy {bad[0] if bad else '(none)'!r}; use fifo, backfill or both")
    if args.horizon < 1:
        ap.error("--horizon: minutes, at least 1")
    if not args.skip_slurm and slurm_missing():
        print(f"skip slurm: {slurm_missing()}")
        return 0
    sys.path[:0] = [str(ROOT), str(ROOT / "platform")]
    nodes = args.nodes or (512 if args.full else 128)
    n_jobs = args.jobs or (4800 if args.full else 1200)
    jobs = make_jobs(ROOT, nodes, n_jobs, args.seed, args.big_share)
    demand = sum(j["gpus"] for j in jobs)
    print(f"world: {nodes} nodes x {GPN} GPUs = {nodes * GPN} GPUs, leaves of {LEAF} nodes; {n_jobs} Philly jobs "
          f"asking {demand} GPUs ({demand / (nodes * GPN):.2f}x capacity), "
          f"{sum(1 for j in jobs if j['tasks'] > 1)} multi-node, longest limit {max(j['minutes'] for j in jobs)} min, "
          f"{sum(1 for j in jobs if ended_by(j, args.horizon))} end within {args.horizon} min; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    for sched in scheds:
        ours = run_ours(nodes, jobs, sched == "backfill", args.horizon)
        sl = None if args.skip_slurm else run_slurm(nodes, jobs, sched, args.horizon, args.slurm_defaults, args.keep)
        report(sched, nodes, jobs, args.horizon, ours, sl)
    print(f"\nload average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
