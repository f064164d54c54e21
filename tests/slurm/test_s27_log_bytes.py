"""A Slurm task's output goes through the node agent's byte rule (agent.executor.decode_output): each byte that is not
part of a UTF-8 character, and NUL, is one "?", and the valid text around it is kept, so the stored log reads as the
agent's would and its offsets count the file's bytes. The backend had its own rule: one bad byte made every non-ASCII
byte of the chunk a "?" (an "é" became "??")."""
from __future__ import annotations

from gpuplatform.models import TaskLog
from gpuplatform.slurm.backend import LOG_CHUNK
from tests.slurm.test_backend import at, bind, out_dir, slurm, tasks_of  # noqa: F401 - the fixture

RAW = "loss é 0.5 ".encode() + b"\xff\x00" + " → done\n".encode()


def _running(fake, backend, job):
    jid = fake.only(f"gpp-{job.pk}-a0")
    fake.set_state(jid, "RUNNING", gpus=["gpu:1(IDX:0)"])
    (t,) = tasks_of(job)
    (out_dir(backend, job) / f"task-{t.pk}.started").write_text("4242\n")
    return t


def test_slurm_task_output_bytes_follow_the_agents_rule(slurm, submit):
    fake, backend = slurm
    job = submit("bytes", tasks=1, gpus=1, time_limit_seconds=600)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(1))
    t = _running(fake, backend, job)
    (out_dir(backend, job) / f"task-{t.pk}.out").write_bytes(RAW)
    backend.sync(at(2))
    log = TaskLog.objects.get(task=t)
    assert log.data == "loss é 0.5 ?? → done\n"
    assert (log.offset, log.size) == (0, len(RAW)) and len(log.data.encode()) == len(RAW)


def test_a_full_chunk_never_splits_a_character(slurm, submit):
    fake, backend = slurm
    job = submit("split", tasks=1, gpus=1, time_limit_seconds=600)
    bind(job, ("gpn1", (0,)))
    backend.sync(at(1))
    t = _running(fake, backend, job)
    body = b"a" * (LOG_CHUNK - 1) + "é tail\n".encode()  # the chunk's last byte is the first of "é"
    (out_dir(backend, job) / f"task-{t.pk}.out").write_bytes(body)
    backend.sync(at(2))
    backend.sync(at(3))
    text = "".join(r.data for r in TaskLog.objects.filter(task=t).order_by("offset"))
    assert text == body.decode() and "?" not in text
    assert sum(r.size for r in TaskLog.objects.filter(task=t)) == len(body)
