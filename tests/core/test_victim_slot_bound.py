"""The victim search's slot bound (actions/victim_search._short_of_slots) skips only placement attempts that
would fail: a replay whose queues contend (reclaim evicts) decides the same, cycle for cycle, with the bound
and without it, and the bound did skip attempts there."""
from __future__ import annotations

from scheduler.core.actions import victim_search
from tests.sim.test_replay_digest import run


def test_the_slot_bound_changes_no_decision(monkeypatch):
    bound = victim_search._short_of_slots
    seen = {"skipped": 0, "asked": 0}

    def counted(*args):
        short = bound(*args)
        seen["asked"] += 1
        seen["skipped"] += short
        return short

    monkeypatch.setattr(victim_search, "_short_of_slots", counted)
    with_bound, report, cycles = run("philly")
    monkeypatch.setattr(victim_search, "_short_of_slots", lambda *args: False)
    without, report_without, cycles_without = run("philly")
    assert seen["skipped"] > 20 and seen["asked"] > seen["skipped"], seen
    assert report.evictions_by_rule.get("reclaim", 0) > 0, report.evictions_by_rule
    assert (with_bound, cycles) == (without, cycles_without)
