"""New-user trial 26, finding 7: a task's output is stored as UTF-8 text (a PostgreSQL text column holds no NUL), so
it is not "the task's bytes as they are": the agent decoded invalid UTF-8 with U+FFFD (3 bytes each, one for a run
of bad bytes) and the server stored NUL as '?'. The trial's 14 bytes came back as 21 ("size": 21), and since the
agent counts offsets in the file's bytes and the server in the stored text's, the next chunk (at the agent's offset
14) overlapped the first and a read skipped its first 7 bytes. Now every byte that is not part of a valid UTF-8
character, and NUL, is one '?' (agent.executor.decode_output), so the stored text has exactly the task's byte count,
offsets and `size` count the task's bytes, and valid UTF-8 is kept as written (docs/execution.md)."""
from __future__ import annotations

import sys

import pytest

from gpuplatform import execution
from gpuplatform.agent.executor import ProcessExecutor, decode_output
from gpuplatform.models import Task
from tests.agent.proc_helpers import assignment, wait_ended
from tests.platform.test_execution import (  # noqa: F401  (agents: fixture)
    EIGHT, agents, at, bind, start_all, tasks_of,
)

TRIAL = b"A\xff\xfeB\xc3(C\xe2\x82D\n\x00Z\n"  # what the trial's task wrote: os.write(1, ...)
STORED = "A??B?(C??D\n?Z\n"  # one '?' for each byte that is not UTF-8 (\xff \xfe \xc3 \xe2 \x82) and for NUL

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")


def test_decode_output_keeps_one_byte_for_one():
    assert decode_output(TRIAL) == STORED and len(STORED.encode()) == len(TRIAL) == 14
    assert decode_output("é€😀 ok".encode()) == "é€😀 ok"  # valid UTF-8 as written
    assert decode_output(b"\xed\xa0\x80|\xf4\x90\x80\x80|\xc0\xaf") == "???|????|??"  # surrogates, > U+10FFFF, overlong
    for raw in (bytes(range(256)), b"\xe2\x82", b"\x80" * 5):
        assert len(decode_output(raw).encode()) == len(raw)


@pytest.mark.django_db
def test_the_trials_bytes_stored_and_read_with_the_tasks_byte_count(tmp_path, submit, agents):
    """End to end: the agent reads what the task wrote, the server stores it, the API's read gives it back: the
    trial's bytes as documented, `size` the 14 bytes the task wrote, and a later chunk read whole."""
    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.5)
    script = "import os; os.write(1, %r)" % TRIAL
    assert ex.start(assignment(7, "", argv=[sys.executable, "-c", script])) == "started"
    wait_ended(ex, [(7, 0)])
    off, end, text = ex.log_chunk((7, 0))
    assert (off, end, text) == (0, 14, STORED)

    job = submit("bytes", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    (task,) = tasks_of(job)
    node = Task.objects.get(pk=task.pk).node
    assert execution.append_log(node, task_id=task.pk, attempt=0, offset=off, data=text, at=at(1)) == (True, "", end)
    assert execution.append_log(node, task_id=task.pk, attempt=0, offset=end, data="after\n", at=at(2)) == (
        True, "", end + 6)
    read = execution.read_log(task)
    assert (read["data"], read["size"], read["next_offset"]) == (STORED + "after\n", 20, 20)
    assert execution.read_log(task, offset=14)["data"] == "after\n"
