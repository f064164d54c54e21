"""gpuctl without a server: what `submit` sends for the new run flags (--command / argv after --, --env,
--workdir, --image, --max-restarts, --time-limit, --file JSON or YAML), the clear errors for bad flags
(exit 2, never a traceback), and how `logs` pages, follows and reports trimming, against a scripted API."""
from __future__ import annotations

import json

import pytest

from gpuplatform import cli

API = ["--api", "http://gpu.example:8000", "--token", "t"]


class FakeApi:
    """Stands in for cli.Client: records each call, answers from `answers` (a function of method, path,
    params/body)."""

    calls: list = []
    answers = None

    def __init__(self, base, token, timeout=30.0):
        pass

    def request(self, method, path, body=None, headers=None):
        FakeApi.calls.append((method, path, body))
        return FakeApi.answers(method, path, body), {}

    def get(self, path, **params):
        params = {k: v for k, v in params.items() if v is not None}
        FakeApi.calls.append(("GET", path, params))
        return FakeApi.answers("GET", path, params), {}


@pytest.fixture
def api(monkeypatch):
    FakeApi.calls = []
    FakeApi.answers = lambda method, path, body: {"id": 7, "name": "x", "team": "alpha", "queue": "alpha",
                                                   "state": "pending", "gpus": 1, "priority": 0, "nodes": [],
                                                   "position": 1, "pending_reason": "waiting"}
    monkeypatch.setattr(cli, "Client", FakeApi)
    return FakeApi


def sent_body(api):
    posts = [c for c in api.calls if c[0] == "POST"]
    assert len(posts) == 1, api.calls
    return posts[0][2]


def test_submit_sends_command_env_workdir_image_restarts_and_time_limit(api, capsys):
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x",
                     "--command", "python3 train.py --name 'run one'", "--env", "NCCL_DEBUG=INFO", "--env", "EQ=a=b", "--env", "EMPTY=", "--workdir", "/srv/run",
                     "--image", "nvcr.io/nvidia/pytorch:24.05-py3", "--max-restarts", "2", "--time-limit", "3600",
                     "--completion-role", "worker"])
    assert code == 0, capsys.readouterr().err
    body = sent_body(api)
    assert body["command"] == ["python3", "train.py", "--name", "run one"]
    assert body["env"] == {"NCCL_DEBUG": "INFO", "EQ": "a=b", "EMPTY": ""}
    assert (body["working_dir"], body["image"], body["max_restarts"], body["time_limit_seconds"],
            body["completion_role"]) == ("/srv/run", "nvcr.io/nvidia/pytorch:24.05-py3", 2, 3600, "worker")
    assert body["roles"] == [{"name": "worker", "tasks": 1, "gpus_per_task": 1, "flavor": ""}]


def test_submit_takes_the_argv_after_double_dash(api, capsys):
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--gpus", "2", "--",
                     "python3", "-c", "import sys; print(sys.argv)", "--epochs", "3"])
    assert code == 0, capsys.readouterr().err
    body = sent_body(api)
    assert body["command"] == ["python3", "-c", "import sys; print(sys.argv)", "--epochs", "3"]
    assert body["roles"][0]["gpus_per_task"] == 2 and "env" not in body and "max_restarts" not in body
    assert body["time_limit_seconds"] is None


@pytest.mark.parametrize("argv, message", [
    (["--command", "python3 x.py", "--", "python3", "y.py"], "either with --command or after --, not both"),
    (["--command", "python3 -c 'print(1)"], "--command is not a valid shell word list: No closing quotation"),
    (["--command", "   "], "--command is empty"),
    ([], "a job needs a command"),
    (["--command", "x", "--env", "NOEQUALS"], "--env expects NAME=VALUE, got 'NOEQUALS'"),
    (["--command", "x", "--env", "1BAD=x"], "'1BAD' is not a variable name"),
    (["--command", "x", "--env", "A=1", "--env", "A=2"], "--env A is given twice"),
    (["--command", "x", "--max-restarts", "-1"], "--max-restarts must be 0 or more, got -1"),
    (["--command", "x", "--time-limit", "0"], "--time-limit is in seconds and must be positive"),
])
def test_submit_refuses_bad_run_flags_clearly(api, capsys, argv, message):
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.startswith("gpuctl submit: ") and "Traceback" not in err
    assert api.calls == []


@pytest.mark.parametrize("argv, message", [
    (["submit", "--queue", "a", "--name", "x", "--command", "x", "--max-restarts", "two"],
     "argument --max-restarts: invalid int value: 'two'"),
    (["submit", "--queue", "a", "--name", "x", "--command", "x", "--time-limit", "1h"],
     "argument --time-limit: invalid int value: '1h'"),
    (["logs"], "the following arguments are required: id"),
    (["logs", "seven"], "argument id: invalid int value: 'seven'"),
    (["submit", "--command"], "argument --command: expected one argument"),
])
def test_bad_flags_are_usage_errors(api, capsys, argv, message):
    assert cli.main([*API, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "usage: gpuctl" in err and "Traceback" not in err


def test_file_bodies_pass_the_run_fields_through_and_flags_override(api, tmp_path, capsys):
    job = {"name": "x", "queue": "alpha", "command": "python3 train.py", "env": {"A": "1"},
           "working_dir": "/srv", "max_restarts": 1, "roles": [{"name": "worker", "tasks": 2},
                                                              {"name": "eval", "command": ["python3", "eval.py"]}]}
    as_json = tmp_path / "job.json"
    as_json.write_text(json.dumps(job))
    assert cli.main([*API, "submit", "--file", str(as_json)]) == 0
    assert sent_body(api) == job
    api.calls.clear()
    as_yaml = tmp_path / "job.yaml"
    as_yaml.write_text("name: x\nqueue: alpha\ncommand: [python3, train.py]\nenv:\n  A: '1'\nmax_restarts: 1\n"
                       "roles:\n  - {name: worker, tasks: 2}\n  - {name: eval, command: python3 eval.py}\n")
    assert cli.main([*API, "submit", "--file", str(as_yaml), "--max-restarts", "3", "--env", "B=2",
                     "--", "python3", "other.py"]) == 0
    body = sent_body(api)
    assert body["command"] == ["python3", "other.py"] and body["env"] == {"B": "2"} and body["max_restarts"] == 3
    assert body["roles"][1] == {"name": "eval", "command": "python3 eval.py"}
    capsys.readouterr()


@pytest.mark.parametrize("text", [
    '{"name": "x", "queue": "alpha", "command": "python3 train.py", "roles": [{"name": "worker", "tasks": 2}]}',
    "name: x\nqueue: alpha\ncommand: python3 train.py\nroles:\n  - {name: worker, tasks: 2}\n",
])
def test_file_dash_reads_the_body_from_standard_input(api, capsys, monkeypatch, text):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert cli.main([*API, "submit", "--file", "-", "--max-restarts", "2"]) == 0
    assert sent_body(api) == {"name": "x", "queue": "alpha", "command": "python3 train.py",
                              "roles": [{"name": "worker", "tasks": 2}], "max_restarts": 2}
    capsys.readouterr()


@pytest.mark.parametrize("text, message", [
    ('{"name": "x", "queue": "alpha", "roles": [{"name": "w", "tasks": 010}]}', "standard input is not valid JSON"),
    ('{"name": "x", "queue": "alpha",}', "standard input is not valid JSON"),
    ('{"name": "x", "roles": [{"tasks": 8, "name": "w", "tasks": 1}]}', "duplicate key 'tasks'"),
    ("name: x\nroles:\n  - {tasks: 8, name: w, tasks: 1}\n", "duplicate key 'tasks'"),
    ("name: [unclosed", "standard input is not valid YAML"),
    ("[1, 2]", "standard input must hold one object (the job), not list"),
    ("", "standard input is empty (expected one object: the job)"),
])
def test_bad_standard_input_is_a_clear_error(api, capsys, monkeypatch, text, message):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert cli.main([*API, "submit", "--file", "-"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("gpuctl submit: ") and "Traceback" not in err


@pytest.mark.parametrize("name, text, message", [
    ("dup.json", '{"name": "x", "queue": "alpha", "name": "y"}', "duplicate key 'name' (each key may be given once)"),
    ("dup.yaml", "name: x\nqueue: alpha\nname: y\n", "duplicate key 'name' (each key may be given once)"),
    ("bad.json", "{not json", "is not valid JSON"),
    ("bad.yml", "name: [unclosed", "is not valid YAML"),
    ("list.json", "[1, 2]", "must hold one object (the job), not list"),
    ("absent.json", None, "cannot read"),
])
def test_bad_files_are_clear_errors(api, tmp_path, capsys, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    assert cli.main([*API, "submit", "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("gpuctl submit: ") and "Traceback" not in err


@pytest.mark.parametrize("name, text, message", [
    # new-user trial 23: a YAML date was a TypeError traceback from json.dumps; .inf a parse error naming no field
    ("d.yaml", "queue: demo\nname: 2024-01-01\ncommand: sleep 1\nroles:\n  - name: w\n    tasks: 1\n",
     "name: YAML read 2024-01-01 as a date; quote it ('2024-01-01')"),
    ("e.yaml", "name: x\nenv: {RUN_DATE: 2024-01-01}\n", "env.RUN_DATE: YAML read 2024-01-01 as a date; quote it"),
    ("t.yml", "name: x\nroles: [{name: w, env: {AT: 2024-01-01T10:00:00Z}}]\n",
     "roles[0].env.AT: YAML read 2024-01-01T10:00:00Z as a date and time; quote it ('2024-01-01T10:00:00Z')"),
    ("k.yaml", "name: x\nenv: {2024-01-01: a}\n", "env: YAML read the key 2024-01-01 as a date; quote it"),
    ("inf.yaml", "name: x\nroles:\n  - name: w\n    tasks: .inf\n",
     "roles[0].tasks: must be a finite number (YAML read .inf)"),
    ("nan.yaml", "name: x\nroles:\n  - {name: a, tasks: 1}\n  - {name: w, gpus_per_task: .nan}\n",
     "roles[1].gpus_per_task: must be a finite number (YAML read .nan)"),
    ("inf.json", '{"name": "x", "priority": -Infinity}', "priority: must be a finite number (JSON read -Infinity)"),
    ("nan.json", '{"name": "x", "roles": [{"tasks": NaN}]}', "roles[0].tasks: must be a finite number (JSON read NaN)"),
    ("bin.yaml", "name: x\nimage: !!binary aGk=\n", "image: YAML read binary data (!!binary)"),
])
def test_values_json_cannot_carry_are_refused_naming_their_path(api, tmp_path, capsys, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    assert cli.main([*API, "submit", "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuctl submit: ") and message in err and "Traceback" not in err, err
    assert api.calls == []  # nothing sent


def test_a_quoted_date_is_a_string(api, tmp_path, capsys):
    path = tmp_path / "q.yaml"
    path.write_text("name: '2024-01-01'\nenv: {RUN_DATE: \"2024-01-01\"}\n")
    assert cli.main([*API, "submit", "--file", str(path)]) == 0, capsys.readouterr().err
    assert sent_body(api) == {"name": "2024-01-01", "env": {"RUN_DATE": "2024-01-01"}}


def log_api(pages_by_offset, job=None):
    """answers: the job (GET /api/v1/jobs/7/), and log pages looked up by the offset asked for (None = none)."""
    def answer(method, path, params):
        if path == "/api/v1/jobs/7/":
            return job or {"id": 7, "roles": [{"name": "worker"}],
                           "tasks": [{"id": 31, "name": "worker-0"}, {"id": 32, "name": "worker-1"}]}
        assert path == "/api/v1/jobs/7/logs/" and params["limit"] == cli.LOG_LIMIT_BYTES
        page = pages_by_offset[params.get("offset")]
        return page() if callable(page) else page
    return answer


def page(offset, data, size, *, attempt=0, trimmed=False, complete=False, task=31):
    return {"task": task, "name": "worker-0", "attempt": attempt, "offset": offset,
            "next_offset": offset + len(data.encode()), "size": size, "trimmed": trimmed, "data": data,
            "complete": complete}


def test_logs_prints_every_page_of_the_first_task(api, capsys):
    api.answers = log_api({None: page(100, "ab\n", 106, trimmed=True), 103: page(103, "cd\n", 106)})
    assert cli.main([*API, "logs", "7"]) == 0
    out = capsys.readouterr()
    assert out.out == "ab\ncd\n" and out.err == "(older output trimmed)\n"
    log_calls = [c[2] for c in api.calls if c[1].endswith("/logs/")]
    assert log_calls == [{"task": "31", "limit": 65536}, {"task": "31", "offset": 103, "limit": 65536}]


def test_logs_follow_polls_until_complete_and_restarts_on_a_new_attempt(api, capsys, monkeypatch):
    waits = []
    monkeypatch.setattr(cli, "_sleep", waits.append)
    # After "one\n" the gang restarts (attempt 1): the view starts that attempt from its beginning.
    pages = {None: [page(0, "", 0), page(0, "two\n", 4, attempt=1, complete=True)], 0: [page(0, "one\n", 4)],
             4: [page(4, "", 0, attempt=1)]}
    api.answers = log_api({k: (lambda k=k: pages[k].pop(0)) for k in pages})
    assert cli.main([*API, "logs", "7", "--task", "worker-0", "--follow"]) == 0
    out = capsys.readouterr()
    assert out.out == "one\ntwo\n" and "--- worker-0: attempt 1 ---" in out.err
    # two waits for output; then (the scripted job says no state) END_WAIT_POLLS waits for the job's end
    assert waits == [cli.LOG_POLL_SECONDS] * (2 + cli.END_WAIT_POLLS)
    assert "job 7 unknown (still live)" in out.err
    assert all(c[2]["task"] == "worker-0" for c in api.calls if c[1].endswith("/logs/"))
    # --task given: no job lookup for the task; one at the end, for how it ended (the scripted job has no state)
    assert len([c for c in api.calls if c[1] == "/api/v1/jobs/7/"]) == 1 + cli.END_WAIT_POLLS


@pytest.mark.parametrize("job_state, task, code, end", [
    # new-user trial 13, F20: the job exited with code 4; gpuctl printed nothing about it and exited 0
    ("failed", {"state": "failed", "exit_code": 4, "exit_signal": None, "end_message": "exited with code 4"},
     3, "gpuctl logs: worker-0 ended: failed, exit code 4; job 7 failed: task worker[0] exited with code 4 "
        "[diagnosis unknown]\n"),
    ("succeeded", {"state": "succeeded", "exit_code": 0, "exit_signal": None},
     0, "gpuctl logs: worker-0 ended: succeeded, exit code 0; job 7 succeeded\n"),
    # new-user trial 14, F11: a cancel is not a failure: the task reads cancelled, exit 4 (3 is a failure)
    ("cancelled", {"state": "released", "exit_code": None, "exit_signal": 9, "end_message": ""},
     4, "gpuctl logs: worker-0 ended: cancelled, killed by signal 9; job 7 cancelled: cancelled by admin\n"),
    ("failed", {"state": "failed", "exit_code": None, "exit_signal": None, "end_message": "agent restarted; no exit"},
     3, "gpuctl logs: worker-0 ended: failed, agent restarted; no exit; job 7 failed: task worker[0] exited with "
        "code 4 [diagnosis unknown]\n"),
])
def test_logs_follow_ends_saying_how_the_task_and_job_ended_and_fails_with_them(api, capsys, monkeypatch, job_state,
                                                                                task, code, end):
    monkeypatch.setattr(cli, "_sleep", lambda _: None)
    reasons = {"failed": "task worker[0] exited with code 4", "cancelled": "cancelled by admin", "succeeded": ""}
    job = {"id": 7, "state": job_state, "end_reason": reasons[job_state],
           "diagnosis": {"category": "unknown"} if job_state == "failed" else None,
           "tasks": [{"id": 31, "name": "worker-0", **task}]}
    api.answers = log_api({None: page(0, "tick 1\nbye\n", 11, complete=True)}, job=job)
    assert cli.main([*API, "logs", "7", "--task", "worker-0", "--follow"]) == code
    out = capsys.readouterr()
    assert out.out == "tick 1\nbye\n" and out.err == end, out.err
    # without --follow: the output only, exit 0 (nothing waited for)
    assert cli.main([*API, "logs", "7", "--task", "worker-0"]) == 0
    assert capsys.readouterr().err == ""


def test_logs_follow_waits_a_little_for_the_gangs_end_after_a_failed_rank(api, capsys, monkeypatch):
    """A rank stopped by the platform (SIGTERM) ends before its job is marked failed: gpuctl asks again."""
    waits = []
    monkeypatch.setattr(cli, "_sleep", waits.append)
    states = ["running", "running", "failed"]
    task = {"id": 31, "name": "worker-0", "state": "released", "exit_code": None, "exit_signal": 15}
    api.answers = lambda method, path, params: (
        {"id": 7, "state": states.pop(0), "end_reason": "task worker[1] exited with code 3", "tasks": [task]}
        if path == "/api/v1/jobs/7/" else page(0, "got TERM\n", 9, complete=True))
    assert cli.main([*API, "logs", "7", "--task", "worker-0", "--follow"]) == 3
    assert capsys.readouterr().err == ("gpuctl logs: worker-0 ended: released, killed by signal 15; job 7 failed: "
                                       "task worker[1] exited with code 3\n")
    assert waits == [cli.LOG_POLL_SECONDS] * 2


class _Terminal:
    """A stream that says it is a terminal (or not), keeping what was written."""

    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass


EVIL = "ok\tcol\r\nred \x1b[31mX\x1b[0m \x1b]0;title\x07 over\rwrite \u202eevil \x9b\x7f ü 日本\n"


@pytest.mark.parametrize("tty, raw, shown", [
    (True, False, "ok\tcol\r\nred ^[[31mX^[[0m ^[]0;title^G over^Mwrite <U+202E>evil <U+009B>^? ü 日本\n"),
    (True, True, EVIL),   # --raw: as it is
    (False, False, EVIL),  # piped: as it is
])
def test_logs_shows_control_characters_visibly_on_a_terminal(api, monkeypatch, tty, raw, shown):
    """New-user trial 14, F19: a task printing escape sequences (colour, a title change) or a bidi override
    changed the user's terminal through `gpuctl logs`. On a terminal they are shown as ^[ / <U+202E>, with
    newline and tab kept; --raw and a pipe get the bytes as they are."""
    import argparse

    monkeypatch.setattr(cli, "_sleep", lambda _: None)
    job = {"id": 7, "state": "failed", "end_reason": "task worker[0] \x1b[2Jexited", "tasks": [
        {"id": 31, "name": "worker-0", "state": "failed", "exit_code": 1, "exit_signal": None}]}
    api.answers = log_api({None: page(0, EVIL, len(EVIL.encode()), complete=True)}, job=job)
    out, err = _Terminal(tty), _Terminal(tty)
    a = argparse.Namespace(id=7, task="worker-0", attempt=None, follow=True, json=False, raw=raw)
    with pytest.raises(cli.Unsuccessful):
        cli.cmd_logs(cli.Client("http://x", "t"), a, out=out, err=err)
    assert out.text == shown
    assert ("^[[2Jexited" in err.text) == (tty and not raw), err.text
    assert cli.build_parser().parse_args(["logs", "7", "--raw"]).raw is True


def test_logs_json_prints_each_answer(api, capsys):
    api.answers = log_api({None: page(0, "x\n", 2, complete=True)})
    assert cli.main([*API, "--json", "logs", "7", "--follow"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["data"] for line in lines] == ["x\n"]


def test_logs_of_a_job_without_tasks_is_a_clear_error(api, capsys):
    api.answers = log_api({}, job={"id": 7, "roles": [], "tasks": []})
    assert cli.main([*API, "logs", "7"]) == 2
    assert "gpuctl logs: job 7 has no tasks" in capsys.readouterr().err


def test_interrupted_follow_exits_130_quietly(api, capsys, monkeypatch):
    def interrupt(_):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_sleep", interrupt)
    api.answers = log_api({None: page(0, "", 0)})
    assert cli.main([*API, "logs", "7", "--follow"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_submit_sends_sub_group_tier_names_and_numa(api, capsys):
    """The CLI passes a role's sub-group, tier names and the NUMA policy (api-subgroup-tier-limit-ignored.yaml)."""
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--tasks", "16", "--group-size", "8",
                     "--group-tier", "nvlink", "--topology", "hard", "--highest-tier", "2", "--numa", "single",
                     "--command", "python3 train.py"])
    assert code == 0, capsys.readouterr().err
    body = sent_body(api)
    assert (body["roles"][0]["group_size"], body["roles"][0]["group_highest_tier"]) == (8, "nvlink")
    assert (body["highest_tier"], body["numa"]) == (2, "single")


def test_submit_sends_interruptible_only_when_asked(api, capsys):
    """--interruptible: the job may be stopped at once and run on hot spares; without it the field is left to
    the server's default (false)."""
    assert cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--interruptible", "--command", "true"]) == 0
    assert sent_body(api)["interruptible"] is True
    api.calls.clear()
    assert cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--command", "true"]) == 0
    assert "interruptible" not in sent_body(api)


def test_submit_file_takes_job_flags_over_it_and_refuses_role_flags(api, tmp_path, capsys):
    """New-user report item 11: `--file job.json --name override` sent the file's name, silently. Job flags
    now apply over the file; role flags (the file's roles are a list) are refused with exit 2."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": "fromfile", "queue": "alpha", "command": "true", "priority": 1,
                                "roles": [{"name": "worker", "tasks": 2, "gpus_per_task": 1}]}))
    assert cli.main([*API, "submit", "--file", str(path), "--name", "override", "--priority", "0", "--team", "t",
                     "--no-preempt"]) == 0
    body = sent_body(api)
    assert (body["name"], body["priority"], body["team"], body["preemptible"]) == ("override", 0, "t", False)
    assert body["roles"] == [{"name": "worker", "tasks": 2, "gpus_per_task": 1}]
    api.calls.clear()
    capsys.readouterr()
    assert cli.main([*API, "submit", "--file", str(path), "--gpus", "1", "--tasks", "3"]) == 2
    err = capsys.readouterr().err
    assert "--tasks, --gpus cannot be combined with --file" in err and "Traceback" not in err
    assert api.calls == []
    # without --file the role flags keep their defaults
    assert cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--command", "true"]) == 0
    body = sent_body(api)
    assert body["roles"] == [{"name": "worker", "tasks": 1, "gpus_per_task": 1, "flavor": ""}]
    assert (body["priority"], body["topology_mode"]) == (0, "none")


def test_list_into_a_closed_pipe_exits_quietly(tmp_path):
    """New-user report item 10: `gpuctl list | head -5` ended with a BrokenPipeError traceback."""
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        "from gpuplatform import cli\n"
        "class Fake:\n"
        "    def __init__(self, *a, **k): pass\n"
        "    def get(self, path, **params):\n"
        "        job = {'id': 7, 'name': 'x' * 60, 'team': 'alpha', 'queue': 'alpha', 'state': 'pending', 'gpus': 1,\n"
        "               'priority': 0, 'nodes': [], 'position': 1, 'pending_reason': 'waiting ' * 20}\n"
        "        return {'count': 5000, 'next': None, 'results': [dict(job, id=i) for i in range(5000)]}, {}\n"
        "cli.Client = Fake\n"
        "sys.exit(cli.main(['--api', 'http://gpu.example:8000', 'list']))\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_job_stopping_toward_an_end_says_so_in_the_list(api, capsys):
    """New-user trial 3 item 14: a cancelled job stopping with grace read "preempting"."""
    base = {"team": "alpha", "queue": "alpha", "gpus": 1, "priority": 0, "nodes": ["n0"], "position": None,
            "pending_reason": ""}
    jobs = [{**base, "id": 1, "name": "c", "state": "preempting", "stop": {"target": "cancelled"}},
            {**base, "id": 2, "name": "p", "state": "preempting", "stop": {"target": "requeue"}},
            {**base, "id": 3, "name": "f", "state": "preempting", "stop": {"target": "failed"}},
            {**base, "id": 4, "name": "r", "state": "running", "stop": None}]
    api.answers = lambda method, path, params: {"count": 4, "next": None, "results": jobs}
    assert cli.main([*API, "list"]) == 0
    rows = {line.split()[0]: line.split()[4] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows == {"1": "cancelling", "2": "preempting", "3": "stopping", "4": "running"}


def test_a_base_path_that_is_not_the_api_is_one_line(api, capsys):
    """New-user trial 12, F16: `gpuctl --api http://host/nope list` printed "refused (HTTP 404)" and then the
    server's whole HTML 404 page; an answer that is not JSON means no API there: one line, exit 2."""
    def not_found(method, path, body):
        raise cli.ApiError(404, "<!doctype html>\n<html><title>Not Found</title><h1>Not Found</h1></html>\n")

    api.answers = not_found
    code = cli.main(["--api", "http://gpu.example:8000/nope", "--token", "t", "list"])
    err = capsys.readouterr().err
    assert code == 2 and err == "gpuctl: no GPU platform API at http://gpu.example:8000/nope (HTTP 404)\n", err


def test_set_quota_without_a_value_is_a_usage_error_not_a_silent_no_op(api, capsys):
    """New-user trial 13, F16: `gpuctl set-quota demo H200` with no value printed the current values, rc 0, as if
    it had set something. It changes only the values given (README), so none given is exit 2 saying so."""
    code = cli.main([*API, "set-quota", "alpha", "H100"])
    assert code == 2
    assert "give at least one of --guarantee, --quota, --limit or --no-limit" in capsys.readouterr().err
    assert api.calls == []  # nothing asked of the server


def test_set_quota_patches_only_the_values_given(api, capsys):
    FakeApi.answers = lambda method, path, body: (
        {"results": [{"id": 3}]} if method == "GET" and path == "/api/v1/quotas/" else
        {"queue": "alpha", "flavor": "H100", "guarantee": 1, "quota": 3, "limit": 4})
    assert cli.main([*API, "set-quota", "alpha", "H100", "--quota", "3"]) == 0, capsys.readouterr().err
    assert [c for c in api.calls if c[0] == "PATCH"] == [("PATCH", "/api/v1/quotas/3/", {"quota": 3})]


def test_submit_sends_cpu_and_memory_per_task(api, capsys):
    """--memory-mib (new-user trial 22b: the API takes memory_mib, gpuctl refused the flag) and --cpu-milli go into
    the role as given, so the server's rule names a bad value; with --file they are refused like the other role flags."""
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--cpu-milli", "1500", "--memory-mib", "4096",
                     "--", "sleep", "5"])
    assert code == 0, capsys.readouterr().err
    role = sent_body(api)["roles"][0]
    assert (role["cpu_milli"], role["memory_mib"]) == (1500, 4096)
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x", "--memory-mib", "-5", "--", "sleep", "5"])
    posts = [c for c in api.calls if c[0] == "POST"]
    assert code == 0 and posts[-1][2]["roles"][0]["memory_mib"] == -5  # sent: the server refuses it by name
    with pytest.raises(cli.UsageError, match="--memory-mib cannot be combined with --file"):
        cli.submit_body(cli.build_parser().parse_args(["submit", "--file", "job.json", "--memory-mib", "10"]))
