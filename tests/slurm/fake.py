"""A fake Slurm command line for the unit tests: the SlurmCLI runner interface, answering from the real
outputs recorded in tests/slurm/recorded/ (see its README.md) with each job's and node's own fields put into
the recorded entries. Tests move jobs through Slurm's states with `set_state`; the launcher's files
(started / exit / output) are written by the tests themselves (the real launcher is exercised by
tests/slurm/test_script.py and the integration test)."""
from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

from gpuplatform.slurm.cli import Result

RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


class FakeSlurm:
    """Runner: fake(argv, input) -> Result. `jobs`: {id: dict of fields}; `nodes`: {name: dict}; `calls`: argv
    lists in order; `fail`: {command: stderr} makes that command fail."""

    def __init__(self, nodes=("gpn1", "gpn2"), gpus: int = 2):
        squeue = json.loads(recorded("squeue_running_pending.json"))
        sinfo = json.loads(recorded("sinfo.json"))
        self.squeue_meta = {k: v for k, v in squeue.items() if k != "jobs"}
        self.job_template = squeue["jobs"][0]
        self.sinfo_meta = {k: v for k, v in sinfo.items() if k != "nodes"}
        self.node_template = sinfo["nodes"][0]
        self.jobs: dict[str, dict] = {}
        self.nodes = {n: {"name": n, "state": "idle", "state_flags": [], "reason": "", "gres": f"gpu:{gpus}",
                          "address": "127.0.0.1"} for n in nodes}
        self.calls: list[list[str]] = []
        self.scripts: dict[str, str] = {}
        self.fail: dict[str, str] = {}
        self.next_id = 100

    def __call__(self, argv, input=None) -> Result:
        self.calls.append(list(argv))
        cmd = argv[0]
        if cmd in self.fail:
            return Result(1, "", self.fail[cmd])
        return getattr(self, "_" + cmd)(argv[1:], input)

    # -- commands ------------------------------------------------------------------------------------------
    def _sbatch(self, args, script):
        """One job, or one entry per component of a heterogeneous job ("#SBATCH hetjob" separators), as
        Slurm 22.05 lists them (recorded/squeue_het_running.json): consecutive ids, het_job_id = the first."""
        parts = re.split(r"^#SBATCH hetjob$", script or "", flags=re.M)
        leader = self.next_id + 1
        for offset, part in enumerate(parts):
            opts = dict(re.findall(r"^#SBATCH --([\w-]+)=?(.*)$", part, re.M))
            self.next_id += 1
            jid = str(self.next_id)
            self.scripts[jid] = part
            self.jobs[jid] = {"job_id": int(jid), "name": opts.get("job-name", ""), "job_state": "PENDING",
                              "state_reason": "None", "nodes": "", "gres_detail": [], "exit_code": 0,
                              "requested": opts.get("nodelist", ""), "partition": opts.get("partition", ""),
                              "het_job_id": leader if len(parts) > 1 else 0, "het_job_offset": offset}
        return Result(0, f"{leader}\n")

    def _squeue(self, args, _):
        jobs = []
        for j in self.jobs.values():
            entry = copy.deepcopy(self.job_template)
            entry.update({k: v for k, v in j.items() if k in entry})
            jobs.append(entry)
        return Result(0, json.dumps({**self.squeue_meta, "jobs": jobs}))

    def _sinfo(self, args, _):
        nodes = []
        for n in self.nodes.values():
            entry = copy.deepcopy(self.node_template)
            entry.update(n)
            nodes.append(entry)
        return Result(0, json.dumps({**self.sinfo_meta, "nodes": nodes}))

    def _scancel(self, args, _):
        jid = args[-1]
        if jid not in self.jobs:
            return Result(1, "", f"scancel: error: Kill job error on job id {jid}: Invalid job id specified")
        if not any(a.startswith("--signal") for a in args):
            for j in self.components(jid):  # the leader's id cancels every component
                if j["job_state"] in ("PENDING", "RUNNING"):
                    j["job_state"] = "CANCELLED"
        return Result(0, "")

    def _scontrol(self, args, _):
        opts = dict(a.split("=", 1) for a in args[1:] if "=" in a)
        node = self.nodes[opts["nodename"]]
        if opts.get("state") == "drain":
            node["state_flags"] = ["DRAIN"]
            node["reason"] = opts.get("reason", "")
        elif opts.get("state") == "resume":
            node["state_flags"], node["reason"] = [], ""
        return Result(0, "")

    # -- test controls -------------------------------------------------------------------------------------
    def components(self, jid: str) -> list[dict]:
        """Job `jid`'s entries: itself, or every component when it is a het job's leader."""
        j = self.jobs[jid]
        if j.get("het_job_id") and j["het_job_id"] == j["job_id"]:
            return [c for c in self.jobs.values() if c.get("het_job_id") == j["job_id"]]
        return [j]

    def set_state(self, jid: str, state: str, *, nodes: list | dict | None = None, gpus: list | dict | None = None,
                  reason: str = "None", exit_code: int = 0) -> None:
        """Move job `jid` to Slurm state `state`; `nodes` (default: its --nodelist) and `gpus` (gres_detail per
        node, default "gpu:<n>(IDX:0-<n-1>)" from its --gres) when it runs. A het job's leader id moves every
        component (each on its own --nodelist; `nodes` and `gpus` may be {component offset: list})."""
        for j in self.components(jid):
            cid = str(j["job_id"])
            j["job_state"], j["state_reason"], j["exit_code"] = state, reason, exit_code
            if state == "RUNNING":
                mine = nodes.get(j.get("het_job_offset", 0)) if isinstance(nodes, dict) else nodes
                names = mine or j["requested"].split(",")
                j["nodes"] = ",".join(names)
                m = re.search(r"^#SBATCH --gres=gpu:(\d+)$", self.scripts[cid], re.M)
                n = int(m.group(1)) if m else 0
                mine = gpus.get(j.get("het_job_offset", 0)) if isinstance(gpus, dict) else gpus
                j["gres_detail"] = mine or [f"gpu:{n}(IDX:0-{n - 1})" if n > 1 else f"gpu:{n}(IDX:0)"] * len(names)

    def only(self, name: str) -> str:
        """The id of the one job named `name` (a het job's leader)."""
        ids = [jid for jid, j in self.jobs.items() if j["name"] == name and j.get("het_job_offset", 0) == 0]
        assert len(ids) == 1, (name, self.jobs)
        return ids[0]

    def commands(self, cmd: str) -> list[str]:
        return [shlex.join(c) for c in self.calls if c[0] == cmd]
