#!/usr/bin/env python3
"""Slurm (Debian slurm-wlm 22.05) vs our engine on the same GPU cluster and the same job backlog.

    .venv/bin/python benchmarks/peers/slurm_vs_ours.py            # 128 nodes x 8 GPUs, 1,200 jobs
    .venv/bin/python benchmarks/peers/slurm_vs_ours.py --full     # 512 nodes x 8 GPUs, 4,800 jobs
    options: --nodes N --jobs J --seed S --slurm-defaults --keep --product PATH

How Slurm runs here without real nodes: every node is a State=CLOUD (power-saving) node whose
ResumeProgram is /bin/true and whose ResumeTimeout is an hour, so slurmctld makes its real scheduling
decision (select/cons_tres + sched/backfill + topology/tree, gres/gpu counts) and the job sits in
CONFIGURING with its node list while the "node boots" -- no slurmd, no slurmstepd, nothing launched.
(Multiple slurmd with -N also works with this build, but every running job then costs a ~6 MiB
slurmstepd; the Debian slurm-wlm-emulator front-end build cannot parse FrontendName: unusable.)
Gres: the Debian 22.05.8 build ignores Gres=gpu:8 on NodeName lines here, so the script sets it with
`scontrol update nodename=... gres=gpu:8` after start-up (verified: jobs then get gres:gpu).

Input (same for both): N nodes x 8 GPUs, leaf switches of 16 nodes (tier 2) under one spine (tier 3),
each node its own tier-1 domain (Philly-like); J jobs sampled (seeded) from the real Philly trace
(data/philly/philly_jobs_pollux.csv: num_gpus, duration; --big-share of them, default 5 %, from its
rows above 8 GPUs so multi-node placement shows up), <= 8 GPUs -> one task on one node,
> 8 GPUs -> ceil(g/8) tasks x 8 GPUs (one whole node each); time limit = the job's trace duration
(Slurm --time in minutes, ours JobInfo.time_limit) so both backfills can plan; one queue / partition,
FIFO by submit order, empty cluster, backlog ~1.2x capacity.

Measured: Slurm: sbatch submission rate (jobs/s, 4 parallel sbatch processes; each job gets
--priority = 1,000,000 - its index, so Slurm's queue order is the list order whatever the order the
parallel submissions arrive in, the same FIFO order as ours), then the partition is
switched DOWN -> UP and the time until the last job start is observed (squeue polled every 0.2 s),
plus sdiag's main-scheduler and backfill cycle times (the scheduler's own compute). Ours: one
`scheduler.core.run_cycle` on the equivalent Snapshot (median of 3), the engine's own compute. Then
placement quality for both: jobs / GPUs started, multi-node jobs inside one leaf, whole free nodes
left. The machine is shared: compare ratios, not absolute times.
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
import time
from pathlib import Path

WORK = Path(__import__("os").environ.get("PEERS_WORK") or Path(__import__("tempfile").gettempdir()) / "peers-work")
GPN = 8          # GPUs per node
LEAF = 16        # nodes per leaf switch
PORT = 16817


# ---------------------------------------------------------------- the common input
def philly_rows(product: Path):
    with open(product / "data" / "philly" / "philly_jobs_pollux.csv", newline="") as f:
        return [(int(r["num_gpus"]), float(r["duration"])) for r in csv.DictReader(f)]


def make_jobs(product: Path, nodes: int, n_jobs: int, seed: int, big_share: float = 0.0):
    """Seeded sample of Philly rows; big_share of the jobs drawn from the rows asking > 8 GPUs (0.8 % of
    the trace) so that multi-node placement / topology shows up in a small sample."""
    rng = random.Random(seed)
    rows = philly_rows(product)
    big = [r for r in rows if r[0] > GPN]
    cap = nodes * GPN
    jobs = []
    for i in range(n_jobs):
        g, d = rng.choice(big if rng.random() < big_share else rows)
        g = min(g, cap // 2)
        tasks, per = (1, g) if g <= GPN else (-(-g // GPN), GPN)
        jobs.append({"i": i, "tasks": tasks, "per": per, "gpus": tasks * per, "minutes": max(1, int(-(-d // 60)))})
    return jobs


def node_name(k: int) -> str:
    return f"gn{k + 1:04d}"


def leaf_of(name: str) -> int:
    return (int(name[2:]) - 1) // LEAF


# ---------------------------------------------------------------- quality metrics (same code for both)
def quality(nodes: int, placements: dict, jobs: list) -> dict:
    """placements: job index -> list of (node name, gpus on it)."""
    used = {node_name(k): 0 for k in range(nodes)}
    multi = multi_leaf1 = 0
    for i, pl in placements.items():
        for n, g in pl:
            used[n] += g
        ns = {n for n, _ in pl}
        if len(ns) > 1:
            multi += 1
            multi_leaf1 += len({leaf_of(n) for n in ns}) == 1
    cap = nodes * GPN
    alloc = sum(used.values())
    free = cap - alloc
    whole_free = sum(1 for v in used.values() if v == 0)
    return {"jobs_started": len(placements), "gpus_allocated": alloc, "allocation": alloc / cap,
            "multi_node_started": multi, "multi_node_in_one_leaf": (multi_leaf1 / multi) if multi else None,
            "whole_free_nodes": whole_free,
            "started_1gpu": sum(1 for i in placements if jobs[i]["gpus"] == 1),
            "started_2to8": sum(1 for i in placements if 1 < jobs[i]["gpus"] <= GPN),
            "started_gt8": sum(1 for i in placements if jobs[i]["gpus"] > GPN),
            "free_gpus_on_partial_nodes": free - whole_free * GPN,
            "jobs_fifo_prefix": next((k for k in range(len(jobs)) if k not in placements), len(jobs))}


# ---------------------------------------------------------------- ours
def run_ours(product: Path, nodes: int, jobs: list, repeats: int = 3) -> dict:
    sys.path[:0] = [str(product), str(product / "platform")]
    from scheduler.core import CycleConfig, run_cycle
    from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot

    leaves = -(-nodes // LEAF)
    domains = [DomainInfo("spine", 3)] + [DomainInfo(f"leaf{l}", 2, "spine") for l in range(leaves)]
    domains += [DomainInfo(f"m-{node_name(k)}", 1, f"leaf{k // LEAF}") for k in range(nodes)]
    node_infos = tuple(NodeInfo(name=node_name(k), flavor="gpu", gpus=GPN, domain=f"m-{node_name(k)}") for k in range(nodes))
    cap = nodes * GPN
    queue = QueueInfo("q", quotas={"gpu": QuotaInfo(guarantee=cap, quota=cap, limit=cap)})
    job_infos = tuple(JobInfo(id=f"j{j['i']}", queue="q", roles=(RoleInfo("worker", j["tasks"], j["per"], j["tasks"]),),
                              submit_time=float(j["i"]), time_limit=60.0 * j["minutes"], name=f"j{j['i']}")
                      for j in jobs)
    snap = Snapshot(nodes=node_infos, domains=tuple(domains), queues=(queue,), jobs=job_infos, now=1e6)
    run_cycle(Snapshot(nodes=node_infos[:1], domains=tuple(domains)), CycleConfig())  # warm-up (imports)
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        result = run_cycle(snap, CycleConfig())
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    placements = {}
    for b in result.bindings:
        i = int(str(b.job_id)[1:])
        per = {}
        for t in b.tasks:
            per[t.node] = per.get(t.node, 0) + len(t.gpus)
        placements[i] = list(per.items())
    return {"engine_s": statistics.median(walls), "engine_all_s": walls, "engine_cpu_s": statistics.median(cpus),
            "binds": len(result.bindings),
            "quality": quality(nodes, placements, jobs)}


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


def write_conf(d: Path, nodes: int, defaults: bool) -> Path:
    for sub in ("state", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    last = node_name(nodes - 1)
    sched = "" if defaults else ("SchedulerParameters=default_queue_depth=100000,bf_interval=2,bf_max_job_test=100000,"
                                 "bf_continue,bf_window=20160,bf_resolution=60,sched_min_interval=0\n")
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
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PriorityType=priority/basic
GresTypes=gpu
TopologyPlugin=topology/tree
SlurmctldDebug=error
PrivateData=cloud
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=3600
ResumeTimeout=7200
ResumeRate=0
SuspendRate=0
MaxJobCount=200000
{sched}NodeName=gn[0001-{last[2:]}] CPUs=256 RealMemory=100000 Gres=gpu:{GPN} State=CLOUD
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
            "main_last_us": grab("Main schedule statistics", "Last cycle"),
            "bf_jobs": grab("Backfilling stats", "Total backfilled jobs (since last slurm start)"),
            "bf_cycles": grab("Backfilling stats", "Total cycles"),
            "bf_last_us": grab("Backfilling stats", "Last cycle"),
            "bf_max_us": grab("Backfilling stats", "Max cycle"),
            "bf_mean_us": grab("Backfilling stats", "Mean cycle"),
            "jobs_started": int(re.search(r"Jobs started:\s+(\d+)", out).group(1))}


def run_slurm(nodes: int, jobs: list, defaults: bool, keep: bool) -> dict:
    if not shutil.which("slurmctld-wlm") and not Path("/usr/sbin/slurmctld-wlm").exists():
        raise SystemExit("slurmctld not installed: apt-get install -y --no-install-recommends slurmctld slurm-client")
    d = WORK / "slurm" / f"run-{nodes}"
    if d.exists():
        shutil.rmtree(d)
    conf = write_conf(d, nodes, defaults)
    env = dict(os.environ, SLURM_CONF=str(conf))
    ctld = "/usr/sbin/slurmctld-wlm" if Path("/usr/sbin/slurmctld-wlm").exists() else "slurmctld"
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
        sh(["sdiag", "--reset"], env)
        pid = int((d / "slurmctld.pid").read_text().split()[0])
        tck = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:  # slurmctld's user + system CPU (all its threads)
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / tck

        cpu0 = cpu_s()
        t_up = time.perf_counter()
        sh(["scontrol", "update", "partitionname=gpu", "state=up"], env)
        started, last_change, cpu_at_last, series = 0, t_up, cpu0, []
        settle = 8.0 if not defaults else 70.0
        while True:  # poll sdiag's "Jobs started" counter (cheap RPC; squeue would make slurmctld pack every job)
            n = sdiag(env)["jobs_started"]
            now = time.perf_counter()
            if n != started:
                started, last_change, cpu_at_last = n, now, cpu_s()
                series.append((round(now - t_up, 2), started))
            if now - last_change > settle or now - t_up > 600:
                break
            time.sleep(0.2)
        diag = sdiag(env)
        rows = sh(["squeue", "-h", "-t", "CF,R", "-o", "%i|%N|%b"], env).stdout.splitlines()
        placements = {}
        for row in rows:
            jid, nl, tres = row.split("|")
            per = int(re.search(r"gpu:(\d+)", tres).group(1))
            placements[ids[int(jid)]] = [(n, per) for n in expand(nl)]
        pending_reasons = {}
        for r in sh(["squeue", "-h", "-t", "PD", "-o", "%r"], env).stdout.split():
            pending_reasons[r] = pending_reasons.get(r, 0) + 1
        return {"submit_s": submit_s, "submitted": len(ids), "submit_failed": failed[:5], "n_failed": len(failed),
                "submit_rate": len(ids) / submit_s, "time_to_last_start_s": last_change - t_up,
                "slurmctld_cpu_s": cpu_at_last - cpu0,
                "start_series": series[-6:], "sdiag": diag, "pending_reasons": pending_reasons,
                "quality": quality(nodes, placements, jobs), "defaults": defaults, "dir": str(d)}
    finally:
        sh(["scontrol", "shutdown"], env, check=False)
        time.sleep(1)
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="512 nodes / 4,800 jobs")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--big-share", type=float, default=0.05, help="share of jobs drawn from Philly's >8-GPU rows (default 0.05)")
    ap.add_argument("--slurm-defaults", action="store_true", help="no SchedulerParameters (queue depth 100, bf_interval 30 s)")
    ap.add_argument("--keep", action="store_true", help="keep the Slurm state/log directory")
    ap.add_argument("--product", default=".", help="checkout of our product (read only)")
    ap.add_argument("--skip-slurm", action="store_true")
    args = ap.parse_args()
    nodes = args.nodes or (512 if args.full else 128)
    n_jobs = args.jobs or (4800 if args.full else 1200)
    product = Path(args.product)
    jobs = make_jobs(product, nodes, n_jobs, args.seed, args.big_share)
    demand = sum(j["gpus"] for j in jobs)
    print(f"world: {nodes} nodes x {GPN} GPUs = {nodes * GPN} GPUs, leaves of {LEAF} nodes; {n_jobs} Philly jobs "
          f"asking {demand} GPUs ({demand / (nodes * GPN):.2f}x capacity), "
          f"{sum(1 for j in jobs if j['tasks'] > 1)} multi-node; load average {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.process_time()
    ours = run_ours(product, nodes, jobs)
    print(f"ours : run_cycle median {ours['engine_s'] * 1000:.1f} ms (runs {[round(w * 1000, 1) for w in ours['engine_all_s']]}), "
          f"{ours['binds']} binds, process CPU {time.process_time() - t0:.1f} s", flush=True)
    if args.skip_slurm:
        print(ours)
        return
    sl = run_slurm(nodes, jobs, args.slurm_defaults, args.keep)
    dg = sl["sdiag"]
    print(f"slurm: submitted {sl['submitted']} jobs in {sl['submit_s']:.1f} s = {sl['submit_rate']:.0f} jobs/s "
          f"({sl['n_failed']} refused {sl['submit_failed'][:1]}); partition UP -> last start {sl['time_to_last_start_s']:.2f} s; "
          f"started {dg['jobs_started']}; main sched {dg['main_cycles']} cycles mean {dg['main_mean_us']} us max "
          f"{dg['main_max_us']} us; backfill {dg['bf_cycles']} cycles last {dg['bf_last_us']} us max {dg['bf_max_us']} us, "
          f"{dg['bf_jobs']} jobs backfilled; pending reasons {sl['pending_reasons']}", flush=True)
    qo, qs = ours["quality"], sl["quality"]
    rows = [("jobs started", "jobs_started", "{}"), ("GPUs allocated", "gpus_allocated", "{}"),
            ("allocation", "allocation", "{:.1%}"), ("FIFO prefix started", "jobs_fifo_prefix", "{}"),
            ("  ... of 1 GPU / 2-8 GPUs / >8 GPUs", None, None),
            ("multi-node jobs started", "multi_node_started", "{}"),
            ("  ... inside one leaf", "multi_node_in_one_leaf", "{:.0%}"),
            ("whole free nodes left", "whole_free_nodes", "{}"),
            ("free GPUs on partly used nodes", "free_gpus_on_partial_nodes", "{}")]
    print("\n| metric | ours | Slurm 22.05 | ours / Slurm |\n| --- | --- | --- | --- |")
    for label, k, fmt in rows:
        if k is None:
            print(f"| {label} | {qo['started_1gpu']} / {qo['started_2to8']} / {qo['started_gt8']} | "
                  f"{qs['started_1gpu']} / {qs['started_2to8']} / {qs['started_gt8']} | - |")
            continue
        a, b = qo[k], qs[k]
        fa = "-" if a is None else fmt.format(a)
        fb = "-" if b is None else fmt.format(b)
        ratio = f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"
        print(f"| {label} | {fa} | {fb} | {ratio} |")
    sched_s = ((dg["main_mean_us"] or 0) * (dg["main_cycles"] or 0) + (dg["bf_mean_us"] or dg["bf_last_us"] or 0) * (dg["bf_cycles"] or 0)) / 1e6
    print(f"| scheduler time in cycles (wall) | {ours['engine_s']:.3f} s (1 cycle) | {sched_s:.3f} s "
          f"(sdiag: main + backfill cycle wall, incl. lock yields) | {ours['engine_s'] / sched_s if sched_s else float('nan'):.2f} |")
    print(f"| CPU to place the backlog | {ours['engine_cpu_s']:.3f} s (process CPU, 1 cycle) | "
          f"{sl['slurmctld_cpu_s']:.3f} s (slurmctld user+sys CPU, UP -> last start, incl. sdiag polls) | "
          f"{ours['engine_cpu_s'] / sl['slurmctld_cpu_s'] if sl['slurmctld_cpu_s'] else float('nan'):.3f} |")
    print(f"| wall, backlog released -> last start | {ours['engine_s']:.3f} s (engine only, no DB) | "
          f"{sl['time_to_last_start_s']:.2f} s (RPC + state save + intervals) | "
          f"{ours['engine_s'] / sl['time_to_last_start_s'] if sl['time_to_last_start_s'] else float('nan'):.3f} |")
    print(f"| placements per second | {ours['binds'] / ours['engine_s']:.0f} | "
          f"{dg['jobs_started'] / sl['time_to_last_start_s'] if sl['time_to_last_start_s'] else float('nan'):.0f} | "
          f"{(ours['binds'] / ours['engine_s']) / (dg['jobs_started'] / sl['time_to_last_start_s']) if sl['time_to_last_start_s'] and dg['jobs_started'] else float('nan'):.1f} |")


if __name__ == "__main__":
    main()
