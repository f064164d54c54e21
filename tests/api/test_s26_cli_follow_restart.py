"""New-user trial 26, F3 (gpuctl's side): `gpuctl logs --follow` ended at once with exit 0 and "worker-0 ended:
running; job 34 running: ..." when the attempt it read had ended but the job had gone on to a new attempt: it took
the job's task (the new attempt's, running) for how the attempt read ended. Now --follow follows the restarted gang
into its new attempt until that ends, and a followed earlier attempt (--attempt) ends with that attempt's own
state. Against a scripted API (tests/api/test_cli_args.py's FakeApi)."""
from __future__ import annotations

from gpuplatform import cli

from tests.api.test_cli_args import API, api  # noqa: F401  (api: fixture)


def page(attempt, data, *, state, complete, offset=0):
    size = offset + len(data.encode())
    return {"task": 31, "name": "worker-0", "attempt": attempt, "offset": offset, "next_offset": size, "size": size,
            "data": data, "complete": complete, "state": state, "note": "", "expect_output": True}


def scripted(api, steps):
    """`steps`: (log page, job) answered in turn, one per log read; the job answer is the last step's."""
    now = {"job": None}

    def answer(method, path, params):
        if path == "/api/v1/jobs/7/logs/":
            log_page, now["job"] = steps.pop(0) if len(steps) > 1 else steps[0]
            return log_page
        assert path == "/api/v1/jobs/7/", path
        return now["job"]
    api.answers = answer


def job(state, attempt, task_state, **kw):
    return {"id": 7, "state": state, "attempt": attempt, "end_reason": kw.pop("end_reason", ""),
            "tasks": [{"id": 31, "name": "worker-0", "state": task_state, **kw}]}


def test_follow_goes_on_into_the_restarted_attempt_and_ends_with_the_job(api, capsys, monkeypatch):
    monkeypatch.setattr(cli, "_sleep", lambda _: None)
    restarted = job("running", 1, "running")
    scripted(api, [
        (page(0, "attempt-zero-output\n", state="running", complete=False), job("running", 0, "running")),
        (page(0, "", state="failed", complete=True, offset=20), restarted),  # attempt 0 failed; the job runs attempt 1
        (page(1, "", state="running", complete=False), restarted),  # (asked from offset 20: the loop starts it over)
        (page(1, "", state="running", complete=False), restarted),
        (page(1, "", state="running", complete=False), restarted),
        (page(1, "", state="released", complete=True),
         job("cancelled", 1, "released", exit_signal=15, end_reason="requested by demo")),
    ])
    code = cli.main([*API, "logs", "7", "--task", "31", "--follow"])
    out = capsys.readouterr()
    assert (code, out.out) == (4, "attempt-zero-output\n"), out.err
    assert out.err == ("--- worker-0: attempt 1 ---\n"
                       "gpuctl logs: worker-0 ended: cancelled, killed by signal 15; job 7 cancelled: requested by "
                       "demo\n")


def test_an_earlier_attempt_followed_ends_with_its_own_state_not_the_running_one(api, capsys, monkeypatch):
    monkeypatch.setattr(cli, "_sleep", lambda _: None)
    scripted(api, [(page(0, "attempt-zero-output\n", state="failed", complete=True),
                    job("running", 1, "running", end_reason="task worker[0] exited with code 3"))])
    code = cli.main([*API, "logs", "7", "--task", "31", "--attempt", "0", "--follow"])
    out = capsys.readouterr()
    assert (code, out.out) == (3, "attempt-zero-output\n")
    assert out.err == ("gpuctl logs: worker-0 (attempt 0) ended: failed; job 7 running: task worker[0] exited with "
                       "code 3\n")
