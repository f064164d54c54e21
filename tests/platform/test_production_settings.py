"""Issue #12, production settings: `check --deploy` clean with DJANGO_PRODUCTION=1 SECURE_SSL=1, an empty
SECRET_KEY refused like an unset one, /metrics closed in production without its token, a Content
Security Policy on every page (and no inline handlers or scripts in the templates it would block)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _manage(*args, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in {"DJANGO_PRODUCTION", "SECURE_SSL", "SECRET_KEY"}}
    full.update(env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=120)


def test_check_deploy_is_clean_behind_the_ssl_setting():
    r = _manage("check", "--deploy", "--fail-level", "WARNING", DJANGO_PRODUCTION="1", SECURE_SSL="1",
                SECRET_KEY="k" * 20 + "-Zq8#vT!m2@pL0$wR5^nB7&xC9*yD4(eF6)gH1_jK3+lM" + "s" * 10,
                METRICS_TOKEN="t", ALLOWED_HOSTS="gpu.example.org")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no issues" in r.stdout


@pytest.mark.parametrize("secret", ["", "   "])
def test_empty_secret_key_is_refused_in_production(secret):
    r = _manage("check", DJANGO_PRODUCTION="1", SECRET_KEY=secret)
    assert r.returncode != 0 and "SECRET_KEY must be set" in r.stderr


@pytest.mark.django_db
def test_metrics_closed_in_production_without_a_token(client, settings):
    settings.PRODUCTION, settings.METRICS_TOKEN = True, ""
    assert client.get("/metrics").status_code == 403
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/healthz", "/api/docs/"])
def test_every_page_carries_the_csp(client, path):
    r = client.get(path)
    policy = r["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0]


def test_templates_have_no_inline_scripts_or_handlers():
    for path in (REPO / "templates").rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"\son[a-z]+=\"", text), path
        for tag in re.findall(r"<script[^>]*>", text):
            assert "src=" in tag or "application/json" in tag, (path, tag)
