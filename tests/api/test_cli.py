"""gpuctl against a live server: submit (with what the job runs), list, get, logs, cancel, set-quota (with
ETag), refusals. Flag handling without a server: test_cli_args.py."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpuctl(live_server, users, capsys):
    from gpuplatform.services import issue_api_token

    from gpuplatform.cli import main

    def run(role, *argv):
        token = issue_api_token(users[role])[0]
        code = main(["--api", live_server.url, "--token", token, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_submit_list_get_cancel(gpuctl):
    code, out, _ = gpuctl("member", "--json", "submit", "--queue", "alpha", "--name", "train", "--tasks", "2",
                          "--gpus", "8", "--min-available", "2", "--command", "python3 train.py --epochs 3")
    assert code == 0
    job = json.loads(out)
    assert (job["name"], job["gpus"], job["state"]) == ("train", 16, "pending")
    code, out, _ = gpuctl("member", "list", "--state", "pending")
    assert code == 0 and "train" in out and "alpha" in out and out.splitlines()[0].startswith("ID")
    code, out, _ = gpuctl("member", "get", str(job["id"]))
    assert code == 0 and "train" in out
    code, out, _ = gpuctl("member", "cancel", str(job["id"]), "--reason", "test")
    assert code == 0 and "cancelled" in out
    code, _, err = gpuctl("member", "cancel", str(job["id"]))
    assert code == 1 and "state:" in err


def test_refusals_name_the_field(gpuctl):
    code, _, err = gpuctl("member", "submit", "--queue", "alpha", "--name", "x", "--tasks", "4", "--min-available", "5",
                          "--command", "true")
    assert code == 1 and "roles[0].min_available" in err
    code, _, err = gpuctl("viewer", "submit", "--queue", "alpha", "--name", "x", "--command", "true")
    assert code == 1 and "HTTP 403" in err
    code, _, err = gpuctl("member", "submit", "--queue", "alpha", "--name", "x", "--command", "true",
                          "--env", "RANK=3")
    assert code == 1 and "--env (env.RANK): RANK is set by the platform" in err  # the flag first (trial 24, F6)


def test_submit_what_the_job_runs_and_read_its_logs(gpuctl, tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    from gpuplatform.models import Job, Task, TaskLog

    code, out, err = gpuctl("member", "--json", "submit", "--queue", "alpha", "--name", "runs", "--gpus", "1",
                            "--env", "NCCL_DEBUG=INFO", "--workdir", "/srv/run", "--max-restarts", "2",
                            "--time-limit", "600", "--", "python3", "-c", "print('hi')")
    assert code == 0, err
    job = Job.objects.get(pk=json.loads(out)["id"])
    role = job.roles.get()
    assert role.command == ["python3", "-c", "print('hi')"] and role.env == {"NCCL_DEBUG": "INFO"}
    assert (role.working_dir, job.max_restarts, job.time_limit_seconds) == ("/srv/run", 2, 600)
    # YAML file: the run fields pass through.
    spec = tmp_path / "job.yaml"
    spec.write_text("name: from-yaml\nqueue: alpha\ncommand: python3 train.py\nmax_restarts: 1\n"
                    "roles: [{name: worker, tasks: 1, gpus_per_task: 1, env: {A: '1'}}]\n")
    code, out, err = gpuctl("member", "--json", "submit", "--file", str(spec))
    assert code == 0, err
    yaml_job = Job.objects.get(pk=json.loads(out)["id"])
    assert yaml_job.max_restarts == 1 and yaml_job.roles.get().command == ["python3", "train.py"]

    # Logs: what the agent sent for the task's current attempt; --follow until the task has ended.
    task = job.tasks.get()
    now = timezone.now()
    TaskLog.objects.create(task=task, attempt=job.attempts, offset=0, size=6, data="hello\n", created_at=now)
    code, out, err = gpuctl("member", "logs", str(job.pk))
    assert (code, out) == (0, "hello\n"), err

    def task_ends(_seconds):
        TaskLog.objects.create(task=task, attempt=job.attempts, offset=6, size=4, data="bye\n",
                               created_at=now + timedelta(seconds=1))
        Task.objects.filter(pk=task.pk).update(state=Task.State.SUCCEEDED, exit_code=0, ended_at=now)

    from gpuplatform import cli
    cli_sleep, cli._sleep = cli._sleep, task_ends
    try:
        code, out, err = gpuctl("member", "logs", str(job.pk), "--task", "worker-0", "--follow")
    finally:
        cli._sleep = cli_sleep
    assert (code, out) == (0, "hello\nbye\n"), err
    code, _, err = gpuctl("member", "logs", str(job.pk), "--task", "nope-3")
    assert code == 1 and "task:" in err


def test_set_quota_creates_then_updates(gpuctl):
    from gpuplatform.models import Quota

    code, out, _ = gpuctl("staff", "set-quota", "alpha", "A100", "--quota", "0", "--limit", "4")
    assert code == 0 and "alpha/A100: guarantee 0, quota 0, limit 4" in out
    code, out, _ = gpuctl("staff", "set-quota", "alpha", "H100", "--guarantee", "2", "--quota", "12", "--limit", "24")
    assert code == 0
    assert Quota.objects.filter(queue__name="alpha", flavor="H100").values_list("guarantee", "quota", "limit").get() \
        == (2, 12, 24)
    code, _, err = gpuctl("staff", "set-quota", "alpha", "H100", "--quota", "40")
    assert code == 1 and "  --quota (quota): " in err  # the flag first, as submit's (trial 25)
    code, _, err = gpuctl("member", "set-quota", "alpha", "H100", "--quota", "8")
    assert code == 1 and "HTTP 403" in err


def test_set_sharing_then_submit_a_fraction_and_see_gpu_equivalents(gpuctl):
    from gpuplatform.models import Event, Gpu, Node

    node = Node.objects.order_by("name").first()
    code, _, err = gpuctl("member", "set-sharing", node.name, "shared", "--gpus", "0,1")
    assert code == 1 and "HTTP 403" in err
    code, out, _ = gpuctl("staff", "set-sharing", node.name, "shared", "--gpus", "0,1")
    assert code == 0 and f"{node.name}: GPU 0 shared, GPU 1 shared, GPU 2 exclusive" in out
    assert list(Gpu.objects.filter(node=node, sharing="shared").values_list("index", flat=True).order_by("index")) == [0, 1]
    assert Event.objects.filter(kind="gpu_sharing", node=node, actor__username="admin").count() == 2
    code, out, _ = gpuctl("member", "--json", "submit", "--queue", "alpha", "--name", "halves", "--tasks", "3",
                          "--gpus", "0.5", "--command", "python3 serve.py")
    assert code == 0, out
    job = json.loads(out)
    assert (job["gpus"], job["gpu_request"], job["roles"][0]["gpu_milli"]) == (1.5, "3x0.5", 500)
    code, out, _ = gpuctl("member", "list")
    assert code == 0 and "1.5 (3x0.5)" in out
    code, _, err = gpuctl("member", "submit", "--queue", "alpha", "--name", "x", "--gpus", "1.5", "--command", "true")
    assert code == 2 and "fraction of one GPU from 0.001 to 0.999" in err


def test_unreachable_api_exits_2(capsys):
    from gpuplatform.cli import main

    assert main(["--api", "http://127.0.0.1:9", "list"]) == 2


def test_bad_file_and_bad_address_are_clear_errors(tmp_path, capsys):
    from gpuplatform.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for argv, expected in ((["--api", "http://127.0.0.1:9", "submit", "--file", str(bad)], "not valid JSON"),
                           (["--api", "http://127.0.0.1:9", "submit", "--file", str(tmp_path / "none.json")],
                            "cannot read")):
        assert main(argv) == 2
        assert expected in capsys.readouterr().err
    assert main(["--api", "not-a-url", "list"]) == 2
    assert "must start with http" in capsys.readouterr().err


def test_list_follows_next_links_past_one_page(gpuctl, users, monkeypatch, live_server, capsys):
    """`gpuctl list --limit N` past the API's page cap follows the `next` links, `--all` lists every job, the
    hint names both; `GPUCTL_API=<server>/api/v1` works (the path is not doubled); `--json` goes after the
    subcommand too (new-user trial 7, F10/F12)."""
    from gpuplatform import cli, services
    from gpuplatform.models import Queue

    monkeypatch.setattr(cli, "PAGE_MAX", 2, raising=False)  # the API's cap is 500: two per page here
    alpha = Queue.objects.get(name="alpha")
    for i in range(5):
        services.submit_job(command=["true"], team=alpha.team, queue=alpha, name=f"many{i}",
                            roles=[{"tasks": 1, "gpus_per_task": 1}], submitter=users["member"])
    code, out, _ = gpuctl("member", "list", "--limit", "4")
    assert code == 0 and sum("many" in line for line in out.splitlines()) == 4
    assert "5 jobs in all" in out and "--all" in out
    code, out, _ = gpuctl("member", "list", "--all")
    assert code == 0 and sum("many" in line for line in out.splitlines()) == 5 and "in all" not in out
    code, out, _ = gpuctl("member", "list", "--json", "--limit", "3")
    assert code == 0 and [j["name"] for j in json.loads(out)["results"]] == ["many4", "many3", "many2"]
    from gpuplatform.services import issue_api_token

    token = issue_api_token(users["member"])[0]
    assert cli.main(["--api", live_server.url + "/api/v1/", "--token", token, "list", "--limit", "1"]) == 0
    assert "many4" in capsys.readouterr().out
    code, _, err = gpuctl("member", "list", "--limit", "0")
    assert code == 2 and "--limit" in err


def test_list_filters_by_the_state_words_it_shows(gpuctl):
    """New-user trial 14, F12: `gpuctl list` showed "cancelling" and `--state cancelling` was refused."""
    from gpuplatform.models import Job

    code, out, _ = gpuctl("member", "--json", "submit", "--queue", "alpha", "--name", "stopper", "--command", "true")
    job = json.loads(out)["id"]
    Job.objects.filter(pk=job).update(state="preempting", stop_target="cancelled")
    code, out, err = gpuctl("member", "list", "--state", "cancelling")
    assert code == 0 and "stopper" in out and "cancelling" in out, err
    code, out, err = gpuctl("member", "list", "--state", "stopping", "--state", "pending")
    assert code == 0 and "stopper" not in out, err
