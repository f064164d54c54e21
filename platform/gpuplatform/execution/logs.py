"""Task output kept by the control plane: appended by node agents, read by the API and the job page.

Limits (settings): a chunk holds at most TASK_LOG_CHUNK_MAX_BYTES (64 KiB) of UTF-8 text; a task attempt
keeps at most TASK_LOG_MAX_BYTES (1 MiB): when a new chunk goes past it, the oldest chunks are deleted
first (the reader is told `trimmed`). A read returns at most TASK_LOG_READ_MAX_BYTES (64 KiB), and at most
`limit` bytes, always whole UTF-8 characters: it never starts or ends inside one (a `limit` smaller than
the next character still returns that character, so paging always progresses).

Offsets are byte offsets in the attempt's output as the agent counts them. A chunk whose offset is
already stored is a retry and is dropped (idempotent); one that starts past the end (the agent skipped
output) is kept, leaving a gap, if the gap is at most TASK_LOG_MAX_BYTES (what an attempt keeps): a chunk
further out is refused with the stored end as `next_offset`, which the agent resumes from (new-user trial 13,
F4: a chunk at offset 2^62 made a finished task's log 4.6 EB "in size", the gap claimed as output).
"""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Sum

from .. import clock
from ..diagnosis.attempts import refresh_late_evidence
from ..lifecycle import lock_jobs
from ..models import Attempt, Job, Task, TaskLog

__all__ = ["append_log", "read_log", "log_limits"]


def log_limits() -> dict[str, int]:
    return {"chunk": int(getattr(settings, "TASK_LOG_CHUNK_MAX_BYTES", 65536)),
            "task": int(getattr(settings, "TASK_LOG_MAX_BYTES", 1 << 20)),
            "read": int(getattr(settings, "TASK_LOG_READ_MAX_BYTES", 65536))}


def append_log(node, *, task_id: int, attempt: int, offset: int, data: str,
               at: datetime | None = None) -> tuple[bool, str, int]:
    """Store one chunk from `node`'s agent. Returns (accepted, detail, next_offset). Refused: unknown
    task, an attempt the job has not reached, a chunk over the size limit, a negative offset, an offset more
    than TASK_LOG_MAX_BYTES past what is stored of the attempt (next_offset: the stored end), a past attempt's
    chunk from a node that attempt did not run on. A chunk of an attempt that has just ended (its last lines) is
    accepted from the node that ran it. NUL characters are stored as "?" (one byte for one: offsets stay the
    agent's). A chunk that arrives after its job ended diagnoses the attempt again with it (diagnosis.attempts.refresh_late_evidence). A chunk of an attempt that is
    ending or has ended (its job preempting or final) is stored holding the job's row, as the end holds it: the end
    reads the chunk or the chunk's refresh reads the end's record, late chunks are refreshed one after the other,
    and the chunk and the refreshed diagnosis are committed together (review 13: R1, R2, R7)."""
    limits = log_limits()
    row = Task.objects.filter(pk=task_id).values_list("job__attempts", "node_id", "job__state", "job_id").first()
    if row is None:
        return False, f"unknown task {task_id}", offset
    attempts, node_id, job_state, job_id = row
    data = data.replace("\x00", "?")  # PostgreSQL text cannot hold NUL; one byte for one keeps the offsets
    raw = data.encode("utf-8", errors="replace")
    if attempt > attempts or attempt < 0:
        return False, f"attempt {attempt} does not exist (the job is on attempt {attempts})", offset
    if attempt == attempts and node_id != node.pk:  # a task not placed in this attempt is on no node
        return False, f"task {task_id} is not on node {node.name}", offset
    if attempt < attempts:  # a past attempt's last lines: only from a node that attempt ran on (review 13, R8)
        ran_on = Attempt.objects.filter(job_id=job_id, number=attempt).values_list("nodes", flat=True).first()
        if not ran_on or node.name not in ran_on:
            return False, f"task {task_id}'s attempt {attempt} did not run on node {node.name}", offset
    if offset < 0:
        return False, "offset must be >= 0", offset
    if len(raw) > limits["chunk"]:
        return False, f"a log chunk may hold at most {limits['chunk']} bytes", offset
    if not raw:
        return True, "", offset
    # (an offset within the first TASK_LOG_MAX_BYTES can be no further past the stored end: no read for it)
    if offset > limits["task"] and offset > (end := _stored_end(task_id, attempt)) + limits["task"]:
        return False, (f"offset {offset} is more than {limits['task']} bytes (TASK_LOG_MAX_BYTES) past the "
                       f"{end} bytes stored of task {task_id} attempt {attempt}: send its output from {end}"), end
    with transaction.atomic():
        if attempt == attempts and job_state in (Job.State.PREEMPTING, *Job.FINAL_STATES):
            # the attempt ends now or has ended: hold the job's row (as the lifecycle's end does) so that the end
            # reads this chunk, or this chunk's refresh reads the end's record and every other late chunk
            lock_jobs([job_id])
            attempts, job_state = Job.objects.filter(pk=job_id).values_list("attempts", "state").first()
        try:
            with transaction.atomic():
                TaskLog.objects.create(task_id=task_id, attempt=attempt, offset=offset, size=len(raw), data=data,
                                       created_at=at or clock.now())
        except IntegrityError:
            return True, "already stored", offset + len(raw)
        _trim(task_id, attempt, limits["task"])
        if attempt == attempts and job_state in Job.FINAL_STATES:  # the last lines of an attempt already recorded
            refresh_late_evidence(job_id, attempt, at=at or clock.now(),
                                  text=_line_start(task_id, attempt, offset) + data)
    return True, "", offset + len(raw)


def _line_start(task_id: int, attempt: int, offset: int) -> str:
    """The start of the line a chunk at `offset` continues: the text after the last newline of the stored chunk
    before it ("" when it starts a line or nothing is stored before it), so that a line cut between two chunks is
    read whole."""
    before = (TaskLog.objects.filter(task_id=task_id, attempt=attempt, offset__lt=offset).order_by("-offset")
              .values_list("data", flat=True).first())
    return before.rpartition("\n")[2] if before else ""


def _stored_end(task_id: int, attempt: int) -> int:
    """The byte offset just after the last chunk stored of the attempt (0 when none): what read_log calls size."""
    last = (TaskLog.objects.filter(task_id=task_id, attempt=attempt).order_by("-offset")
            .values_list("offset", "size").first())
    return last[0] + last[1] if last else 0


def _trim(task_id: int, attempt: int, budget: int) -> None:
    chunks = TaskLog.objects.filter(task_id=task_id, attempt=attempt)
    total = chunks.aggregate(n=Sum("size"))["n"] or 0
    if total <= budget:
        return
    doomed, freed = [], 0
    for pk, size in chunks.order_by("offset").values_list("id", "size"):
        if total - freed <= budget:
            break
        doomed.append(pk)
        freed += size
    TaskLog.objects.filter(pk__in=doomed).delete()


def _continues(byte: int) -> bool:
    return byte & 0xC0 == 0x80  # a UTF-8 continuation byte (10xxxxxx)


def _char_start(raw: bytes, i: int) -> int:
    """`i`, moved forward past the rest of a character it points into (a read never starts mid-character)."""
    while i < len(raw) and _continues(raw[i]):
        i += 1
    return i


def _char_cut(raw: bytes, begin: int, end: int, *, whole: bool) -> int:
    """The end of a slice of `raw` from `begin` of at most `end`, moved back to a character boundary; when
    not even one character fits and `whole` (nothing served yet), that one character (so a read progresses)."""
    if end >= len(raw):
        return len(raw)
    cut = end
    while cut > begin and _continues(raw[cut]):
        cut -= 1
    if cut == begin and whole and begin < len(raw):
        cut = begin + 1
        while cut < len(raw) and _continues(raw[cut]):
            cut += 1
    return cut


def read_log(task: Task, *, attempt: int | None = None, offset: int = 0, limit: int | None = None) -> dict:
    """Up to `limit` bytes (capped at the read limit) of `task`'s output from byte `offset`, of `attempt`
    (default: the job's current one, even before it has logged anything). Returns {task, name, attempt, offset
    (where the returned data starts: `offset`, or the first byte kept when it was trimmed, or the stored end when
    `offset` is past it), next_offset, size (bytes stored so far), trimmed (output before
    `offset` is gone), data, complete (the task attempt has ended and nothing more is stored), state (the
    task's state in that attempt: now, for the current attempt ("pending" before it is placed, so a reader can say
    "no log yet" rather than "running"); for a past attempt, "failed" when its task was the one that failed it
    (Attempt.failed_task), else "released": the attempt ended, whatever the task runs now), note (why nothing is
    stored, when nothing is: not started yet, no output yet, or no process runs this task, and where an earlier
    attempt's output is when one logged; "" otherwise),
    expect_output (false when no process runs the task, a simulated job or node: nothing will come)}."""
    limits = log_limits()
    limit = min(max(int(limit or limits["read"]), 1), limits["read"])
    job_attempt = Job.objects.filter(pk=task.job_id).values_list("attempts", flat=True).first() or 0
    if attempt is None:
        # the job's current attempt, even while it has printed nothing: serving the last attempt that logged (a
        # restarted gang's failed attempt, complete) made `gpuctl logs --follow` end at once while the job ran on
        # (new-user trial 26, F3); the note names the earlier attempt's output instead (_earlier_output)
        attempt = job_attempt
    chunks = TaskLog.objects.filter(task=task, attempt=attempt)
    end = chunks.aggregate(e=Max("offset"))["e"]
    size = 0
    if end is not None:
        last = chunks.filter(offset=end).values_list("size", flat=True).first() or 0
        size = end + last
    first = chunks.order_by("offset").values_list("offset", flat=True).first()
    trimmed = first is not None and offset < first and first > 0
    # an offset past the stored end starts at the end (`offset` in the answer says so): echoing it as next_offset
    # made a follower skip every byte between the end and it once the log grew (new-user trial 15, F6)
    start = min(max(offset, first or 0), size)
    parts, served, at = [], 0, start
    for c_off, c_size, text in (chunks.filter(offset__gte=start - limits["chunk"]).order_by("offset")
                                .values_list("offset", "size", "data")):
        if c_off + c_size <= at:
            continue
        room = limit - served
        if room <= 0:
            break  # before any gap below is skipped: the next read starts exactly where this one stopped
        raw = text.encode("utf-8")
        if c_off > at:  # a gap the agent left: continue from this chunk
            at = c_off
        begin = _char_start(raw, at - c_off)
        if begin >= len(raw):  # `offset` pointed into this chunk's last character
            at = c_off + len(raw)
            continue
        cut = _char_cut(raw, begin, begin + room, whole=not served)
        if cut == begin:
            break  # the next character does not fit: the next read starts with it
        parts.append(raw[begin:cut])
        served += cut - begin
        at = c_off + cut
        if cut < len(raw):
            break  # the limit ended inside this chunk: the next read continues here, not after it
    ended = attempt < job_attempt or task.state not in Task.OPEN_STATES
    name = f"{task.role.name}-{task.index}"
    state = task.state
    if attempt < job_attempt:  # new-user trial 19, F2: a past attempt's read gave the running attempt's state
        failed = (Attempt.objects.filter(job_id=task.job_id, number=attempt)
                  .values_list("failed_task", flat=True).first())
        state = Task.State.FAILED if failed == f"{task.role.name}[{task.index}]" else Task.State.RELEASED
    note, expect_output = _no_output_note(task, name, ended=ended) if size == 0 else ("", True)
    if size == 0 and expect_output:
        note += _earlier_output(task, attempt)
    return {"task": task.pk, "name": name, "attempt": attempt, "offset": start,
            "next_offset": at, "size": size, "trimmed": bool(trimmed),
            "data": b"".join(parts).decode("utf-8", errors="replace"), "complete": bool(ended and at >= size),
            "state": state, "note": note, "expect_output": expect_output}


def _earlier_output(task: Task, attempt: int) -> str:
    """What read_log's note adds when `attempt` of `task` has no output but an earlier attempt logged some: where
    that output is ("; attempt 0 has 16 bytes of output: ask for attempt=0"), since a restarted gang's failed attempt
    usually explains the restart; "" when none did."""
    earlier = (TaskLog.objects.filter(task=task, attempt__lt=attempt).values("attempt")
               .annotate(n=Sum("size")).order_by("-attempt").first())
    if not earlier:
        return ""
    number = earlier["attempt"]
    return (f"; attempt {number} has {earlier['n']} bytes of output: ask for attempt={number} "
            f"(gpuctl logs {task.job_id} --attempt {number})")


def _no_output_note(task: Task, name: str, *, ended: bool) -> tuple[str, bool]:
    """(why an attempt of `task` has no output stored, whether output can still come) for read_log. No process
    runs a task of a simulated job (a replayed trace job: no command) nor one bound to a node whose executor
    is `simulated` (make demo): nothing is ever logged for it, and a reader that waits would wait for ever."""
    from ..models import Node

    job = Job.objects.filter(pk=task.job_id).values("simulated").first() or {}
    if job.get("simulated"):
        return (f"job {task.job_id} is a replayed trace job (simulated): it runs no process, so task {name} has "
                f"no output"), False
    node = Node.objects.filter(pk=task.node_id).values("name", "executor").first() if task.node_id else None
    if node and node["executor"] == Node.Executor.SIMULATED:
        return (f"task {name} is on node {node['name']}, a simulated node (executor 'simulated'): no process is "
                f"started there, so it has no output; a node agent runs real commands (make demo-local)"), False
    if task.state == Task.State.PENDING and not ended:
        return f"task {name} has not started yet (not placed on a node): no output so far", True
    if ended:
        return f"task {name} wrote no output", True
    return f"task {name} has written no output yet", True
