"""gpuctl submit names its own flag when the API refuses a field it filled from one (new-user trial 24, F6):
`--gpus 0.5` on a cluster without shared GPUs printed `roles[0].gpu_fraction: ...`, a field the user never typed.
It prints `--gpus (roles[0].gpu_fraction): ...`; a --file body's own fields keep the API's names."""
from __future__ import annotations

import json

import pytest

from gpuplatform import cli
from tests.api.test_cli_args import API, api  # noqa: F401  (fixture)


@pytest.mark.django_db(transaction=True)
def test_a_fraction_no_gpu_takes_is_refused_naming_the_gpus_flag(live_server, users, capsys):
    from gpuplatform.services import issue_api_token

    token = issue_api_token(users["member"])[0]
    code = cli.main(["--api", live_server.url, "--token", token, "submit", "--queue", "alpha", "--name", "x",
                     "--tasks", "1", "--gpus", "0.5", "--", "true"])
    err = capsys.readouterr().err
    assert code == 1, err
    line = next(line for line in err.splitlines() if "gpu_fraction" in line)
    assert line.startswith("  --gpus (roles[0].gpu_fraction): ") and "takes fractions" in line, err


def refuse(errors):
    def answer(method, path, body):
        raise cli.ApiError(400, errors)
    return answer


@pytest.mark.parametrize("argv, key, shown", [
    (["--tasks", "0"], "roles[0].tasks", "--tasks (roles[0].tasks)"),
    (["--gpus", "99"], "roles[0].gpus_per_task", "--gpus (roles[0].gpus_per_task)"),
    ([], "roles[0].gpus_per_task", "--gpus (roles[0].gpus_per_task)"),  # the default of --gpus
    (["--cpu-milli", "-1"], "roles[0].cpu_milli", "--cpu-milli (roles[0].cpu_milli)"),
    (["--memory-mib", "-1"], "roles[0].memory_mib", "--memory-mib (roles[0].memory_mib)"),
    (["--flavor", "x y"], "roles[0].flavor", "--flavor (roles[0].flavor)"),
    (["--min-available", "5"], "roles[0].min_available", "--min-available (roles[0].min_available)"),
    (["--role", "-"], "roles[0].name", "--role (roles[0].name)"),
    (["--group-size", "3"], "roles[0].group_size", "--group-size (roles[0].group_size)"),
    (["--priority", "9"], "priority", "--priority (priority)"),
    (["--highest-tier", "9"], "highest_tier", "--highest-tier (highest_tier)"),
    (["--time-limit", "9999999999"], "time_limit_seconds", "--time-limit (time_limit_seconds)"),
    (["--env", "RANK=3"], "env.RANK", "--env (env.RANK)"),
    ([], "name", "--name (name)"),
    ([], "roles", "roles"),  # the roles together: no one flag
])
def test_the_one_role_form_names_the_flag_of_each_field(api, capsys, argv, key, shown):  # noqa: F811
    api.answers = refuse({key: ["the rule"]})
    code = cli.main([*API, "submit", "--queue", "alpha", "--name", "x", *argv, "--command", "true"])
    assert code == 1
    assert f"  {shown}: the rule" in capsys.readouterr().err.splitlines()


def test_a_file_body_keeps_the_apis_keys_and_names_the_flags_given_over_it(api, tmp_path, capsys):  # noqa: F811
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": "f", "queue": "alpha", "command": "true",
                                "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 0.5}]}))
    api.answers = refuse({"roles[0].gpu_fraction": ["no GPU takes fractions"], "priority": ["too high"],
                          "name": ["bad"]})
    assert cli.main([*API, "submit", "--file", str(path), "--priority", "9"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert "  roles[0].gpu_fraction: no GPU takes fractions" in err
    assert "  --priority (priority): too high" in err and "  name: bad" in err
