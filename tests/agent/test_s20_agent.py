"""The agent's poll builds the parent -> children map of its /proc scan once (ProcTable), not once per task and per
descendants() call (session 19's review: the poll scans /proc once and looked at each live task's tree with it)."""
from __future__ import annotations

import subprocess
import time

from gpuplatform.agent import executor
from gpuplatform.agent.executor import ProcStat, ProcTable, descendants, scan_proc


def stat(pid: int, ppid: int, dead: bool = False) -> ProcStat:
    return ProcStat(pid, "Z" if dead else "S", ppid, pid, pid, 1)


def test_a_proc_table_gives_the_same_descendants_as_a_plain_dict_and_builds_its_map_once(monkeypatch):
    rows = {1: stat(1, 0), 10: stat(10, 1), 11: stat(11, 10), 12: stat(12, 11), 13: stat(13, 10, dead=True),
            20: stat(20, 1), 21: stat(21, 20)}
    table = ProcTable(rows)
    built = []
    real = executor._children_of
    monkeypatch.setattr(executor, "_children_of", lambda procs: built.append(1) or real(procs))
    for root, want in ((10, {11, 12}), (20, {21}), (1, {10, 11, 12, 20, 21}), (12, set())):
        assert set(descendants(root, table)) == want == set(descendants(root, dict(rows)))
    assert len(built) == 1 + 4  # once for the table; a plain dict builds it per call


def test_scan_proc_is_a_proc_table_that_sees_a_real_child_tree():
    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        for _ in range(200):
            table = scan_proc()
            kids = descendants(child.pid, table)
            if kids:
                break
            time.sleep(0.02)
        assert isinstance(table, ProcTable)
        assert any(table[k].ppid == child.pid for k in kids), kids
    finally:
        child.kill()
        child.wait()
