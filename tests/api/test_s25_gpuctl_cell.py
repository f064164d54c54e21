"""gpuctl's last column for a pending job (new-user trial 25): the reason once, not twice (F1: a no-estimate
note's "(last reason: ...)" repeated the pending reason next to it); an assumed run time said (F2: "starts in about
1 h" hid the note "run time from no history yet (1 h assumed)"); a retry time counted from the cluster's clock like
every other time of the column (F3: "attempt 1 retries at 2026-12-04T17:04:23Z"); the queue position in words
(F6: "#2" read as job 2, the pages' "A #19"). The API's fields are unchanged: display only."""
from datetime import datetime, timedelta, timezone as tz

from gpuplatform.cli import _estimate, _job_line

NOW = datetime(2026, 12, 4, 17, 3, 43, tzinfo=tz.utc)
REASON = "needs 4 H200 GPUs at once; 2 free (+2 on nodes taking no work now: h-3 draining)"


def _pending(**fields) -> dict:
    job = {"id": 7, "name": "big", "team": "a", "queue": "a", "state": "pending", "gpus": 4, "priority": 0,
           "nodes": [], "position": 2, "pending_reason": REASON, "estimated_start": None,
           "estimated_start_p90": None, "estimate_note": "", "estimated_at": NOW.isoformat()}
    job.update(fields)
    return job


def test_a_no_estimate_cell_gives_the_reason_once():
    job = _pending(estimate_note=f"not started within the 168 h horizon (last reason: {REASON})")
    cell = _job_line(job, NOW)[-1]
    assert cell.count("needs 4 H200 GPUs at once") == 1, cell
    assert cell == f"2nd in queue: no estimate: not started within the 168 h horizon; {REASON}"


def test_a_last_reason_other_than_the_current_one_stays():
    note = "not started within the 168 h horizon (last reason: needs 4 H200 GPUs in one tier-1 domain)"
    assert _estimate(_pending(estimate_note=note), NOW) == f"no estimate: {note}"


def test_a_cut_note_still_loses_the_repeated_reason():
    note = f"nothing that is running or queued frees room for it (last reason: {REASON})"[:90]
    long_reason = REASON + " and much more"
    job = _pending(estimate_note=note, pending_reason=long_reason)
    assert _estimate(job, NOW) == "no estimate: nothing that is running or queued frees room for it"


def test_an_assumed_run_time_is_said():
    start = NOW + timedelta(hours=1)
    job = _pending(estimated_start=start.isoformat(), estimated_start_p90=start.isoformat(),
                   estimate_note="run time from no history yet (1 h assumed)")
    assert _estimate(job, NOW) == "starts in about 1 h (run time assumed: no history)"
    job["estimated_start_p90"] = (start + timedelta(hours=1)).isoformat()
    assert _estimate(job, NOW) == "starts in about 1 h (90 %: 2 h; run time assumed: no history)"
    job["estimate_note"] = "run time from the queue's recent jobs (12 jobs)"  # from history: nothing added
    assert _estimate(job, NOW) == "starts in about 1 h (90 %: 2 h)"


def test_a_retry_time_is_counted_from_the_clusters_clock():
    reason = "requeued after attempt 0; attempt 1 retries at 2026-12-04T17:04:23Z"
    start = NOW + timedelta(seconds=40)
    job = _pending(pending_reason=reason, position=1, estimated_start=start.isoformat(),
                   estimated_start_p90=start.isoformat(), estimate_note="run time from its time limit")
    assert _job_line(job, NOW)[-1] == ("1st in queue: starts in about 40 s; "
                                       "requeued after attempt 0; attempt 1 retries in about 40 s")
    later = _job_line(job, NOW + timedelta(seconds=38))[-1]
    assert later.endswith("attempt 1 retries at the next cycle"), later
    first = "waiting for its first attempt; starts at 2026-12-04T19:04:23Z at the earliest"
    assert _job_line(_pending(pending_reason=first), NOW)[-1].endswith(
        "queue: waiting for its first attempt; starts in about 2 h 1 m at the earliest")


def test_the_queue_position_is_not_written_as_an_id():
    for position, words in ((1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                            (21, "21st"), (112, "112th")):
        cell = _job_line(_pending(position=position), NOW)[-1]
        assert cell.startswith(f"{words} in queue: ") and "#" not in cell, cell
    assert _job_line(_pending(position=None), NOW)[-1] == REASON  # before the first cycle
