"""sim.state._job_with builds the same JobInfo as dataclasses.replace (review 11, S7): every field, for the changes
the replay makes (a start) and for any one field, and an unknown field is refused as replace refuses it."""
from __future__ import annotations

from dataclasses import fields, replace

import pytest

from scheduler.core.snapshot import JobInfo, RoleInfo, TaskPlacement
from scheduler.sim.state import _job_with


def _job() -> JobInfo:
    return JobInfo(id="j1", queue="q", roles=(RoleInfo("worker", 2, 4, 2),), priority=3, submit_time=12.5,
                   time_limit=3600.0, preemptible=False, attempts=1)


def test_the_same_value_as_replace():
    job = _job()
    start = {"state": "running", "placement": (TaskPlacement("worker", 0, "n1", (0, 1, 2, 3)),), "start_time": 99.0,
             "reserved": ()}
    made, want = _job_with(job, **start), replace(job, **start)
    assert made == want and type(made) is JobInfo
    assert [getattr(made, f.name) for f in fields(JobInfo)] == [getattr(want, f.name) for f in fields(JobInfo)]
    for f in fields(JobInfo):  # each field alone, to a value of another job: the others kept
        other = replace(job, **{f.name: getattr(JobInfo(id="x", queue="r", roles=()), f.name)})
        assert _job_with(job, **{f.name: getattr(other, f.name)}) == other


def test_an_unknown_field_is_refused():
    with pytest.raises((TypeError, KeyError)):
        _job_with(_job(), colour="red")
