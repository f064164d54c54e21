"""New-user trial 22, G5: the token one-liner (README, the local / Slurm / federation demos' banners) was a Python
traceback (KeyError: 'token') once the demo user held API_TOKENS_PER_USER (20) unexpired tokens, which piled up
because tokens survive demo restarts. Now the line prints the server's answer and exits 1 (setting nothing), and
each demo run keeps only its users' DEMO_TOKENS_KEPT newest tokens. The lines run in bash with curl against a
live server."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from knox.models import AuthToken

README = Path(settings.BASE_DIR) / "README.md"

needs_curl = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None,
                                reason="runs the documented line with bash and curl")


def _bash(line: str, variable: str = "GPUCTL_TOKEN") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != variable}
    return subprocess.run(["bash", "-c", f'{line}\necho "rc=$? {variable}=${{{variable}}}"'],
                          capture_output=True, text=True, timeout=60, env=env)


def _readme_line(api: str, password: str) -> str:
    lines = [ln for ln in README.read_text().splitlines() if ln.startswith("GPUCTL_TOKEN=$(curl")]
    assert len(lines) == 1, "README shows one token line"
    return lines[0].replace("$GPUCTL_API", api).replace("password=...", f"password={password}")


def _fill(user, count: int) -> None:
    from gpuplatform import services

    for _ in range(count):
        services.issue_api_token(user)


@needs_curl
@pytest.mark.django_db(transaction=True)
def test_token_lines_print_the_servers_refusal_and_exit_1(live_server):
    from gpuplatform.management.commands.demo import TOKEN_FROM_ANSWER, ensure_demo_team, token_line

    ensure_demo_team("pw-demo-123", 2)
    User = get_user_model()
    demo, admin = User.objects.get(username="demo"), User.objects.get(username="admin")
    _fill(demo, settings.API_TOKENS_PER_USER)
    _fill(admin, settings.API_TOKENS_PER_USER)
    readme = _readme_line(live_server.url, "pw-demo-123")
    assert TOKEN_FROM_ANSWER in readme  # README shows the demos' own line
    for line, variable in [(token_line(live_server.url, "pw-demo-123"), "GPUCTL_TOKEN"), (readme, "GPUCTL_TOKEN"),
                           (token_line(live_server.url, "pw-demo-123", "TOKEN", export=False), "TOKEN")]:
        run = _bash(line, variable)
        assert "Traceback" not in run.stderr and "KeyError" not in run.stderr
        assert "no token: " in run.stderr and "unexpired tokens (API_TOKENS_PER_USER)" in run.stderr
        assert run.stdout.strip() == f"rc=1 {variable}="
    wrong = _bash(token_line(live_server.url, "not-the-password"))
    assert wrong.stdout.strip() == "rc=1 GPUCTL_TOKEN=" and "no token: " in wrong.stderr
    assert "Traceback" not in wrong.stderr


@needs_curl
@pytest.mark.django_db(transaction=True)
def test_token_line_exports_the_token_that_works(live_server):
    from gpuplatform.management.commands.demo import ensure_demo_team, token_line

    ensure_demo_team("pw-demo-123", 2)
    run = _bash(token_line(live_server.url, "pw-demo-123") + '\nprintenv GPUCTL_TOKEN')
    token = run.stdout.split()[0]
    assert re.fullmatch(r"[0-9a-f]{64}", token) and run.stdout.split()[1] == "rc=0" and run.stderr == ""
    assert subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                           f"Authorization: Token {token}", f"{live_server.url}/api/v1/jobs/"],
                          capture_output=True, text=True, timeout=60).stdout == "200"


def _aged(user, count: int) -> list[str]:
    """`count` tokens of `user`, the i-th created i minutes ago; their digests, newest first."""
    _fill(user, count)
    rows = list(AuthToken.objects.filter(user=user).order_by("digest"))
    now = timezone.now()
    for i, row in enumerate(rows):
        AuthToken.objects.filter(digest=row.digest).update(created=now - timedelta(minutes=i + 1))
    return [r.digest for r in rows]


@pytest.mark.django_db
def test_a_local_demo_run_keeps_only_its_users_newest_tokens():
    from gpuplatform import services
    from gpuplatform.management.commands.demo import DEMO_TOKENS_KEPT, ensure_demo_team

    ensure_demo_team("pw", 2)
    User = get_user_model()
    demo, admin = User.objects.get(username="demo"), User.objects.get(username="admin")
    other = User.objects.create_user("someone-else", password="pw-x-12345")
    newest = _aged(demo, settings.API_TOKENS_PER_USER)
    _aged(admin, 7)
    _aged(other, 9)
    ensure_demo_team("pw", 2)  # the next run
    assert set(AuthToken.objects.filter(user=demo).values_list("digest", flat=True)) == set(newest[:DEMO_TOKENS_KEPT])
    assert AuthToken.objects.filter(user=admin).count() == DEMO_TOKENS_KEPT
    assert AuthToken.objects.filter(user=other).count() == 9  # not the demo's user: untouched
    services.issue_api_token(demo)  # the printed line's request now gets a token
    ensure_demo_team("pw", 2)
    assert AuthToken.objects.filter(user=demo).count() == DEMO_TOKENS_KEPT


@pytest.mark.django_db
def test_a_trace_demo_run_keeps_only_its_users_newest_tokens():
    from gpuplatform import services
    from gpuplatform.management.commands.demo import DEMO_TOKENS_KEPT, Command

    services.create_team("red")
    Command()._users("pw")  # first run: admin and the team's login
    User = get_user_model()
    red, admin = User.objects.get(username="red"), User.objects.get(username="admin")
    _aged(red, settings.API_TOKENS_PER_USER)
    _aged(admin, 12)
    rows = Command()._users("pw")
    assert [r[0] for r in rows] == ["admin", "red"]
    assert AuthToken.objects.filter(user=red).count() == AuthToken.objects.filter(user=admin).count() == DEMO_TOKENS_KEPT


def test_readme_says_how_many_tokens_a_run_keeps():
    from gpuplatform.management.commands.demo import DEMO_TOKENS_KEPT

    text = " ".join(README.read_text().split())
    assert f"A demo user's newest {DEMO_TOKENS_KEPT} API tokens keep working" in text
