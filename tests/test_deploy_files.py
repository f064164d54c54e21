"""docker-compose.yml and the Dockerfile, checked statically (there is no Docker on the machines that run the
tests, so `docker compose up` is NOT exercised here): the file parses as Compose does it (YAML merge keys,
`${VAR:-default}` / `${VAR:?error}` / `$$` interpolation), the image is built once, every command of every
service exists and takes the arguments it is given, and every variable the app services set is one the
settings read."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
APP_SERVICES = ("web", "worker", "beat")
VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value, env: dict):
    """Compose's interpolation of one value (the documented subset: $$, ${V}, ${V:-d}, ${V-d}, ${V:?e}, ${V?e}, $V)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        have = env.get(name)
        unset = have is None or (op is not None and op.startswith(":") and have == "")
        if op and op.endswith("?") and unset:
            raise ValueError(f"required variable {name} is missing: {arg}")
        if op and op.endswith("-") and unset:
            return arg
        return have or ""
    return VAR.sub(one, value)


def compose(env: dict | None = None) -> dict:
    raw = yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # SafeLoader resolves `<<: *app`
    return interpolate(raw, {"SECRET_KEY": "s3cret", **(env or {})})


def test_compose_parses_and_requires_a_secret_key():
    doc = compose()
    assert set(doc["services"]) == {"postgres", "redis", *APP_SERVICES}
    with pytest.raises(ValueError, match="SECRET_KEY"):
        interpolate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), {})
    assert doc["services"]["web"]["ports"] == ["8000:8000"]
    assert compose({"WEB_PORT": "9000"})["services"]["web"]["ports"] == ["9000:8000"]
    for name in doc["volumes"]:
        assert any(v.startswith(f"{name}:") for s in doc["services"].values() for v in s.get("volumes", []))


def test_the_image_is_built_once_and_reused():
    services = compose()["services"]
    assert [n for n, s in services.items() if "build" in s] == ["web"]
    assert {services[n]["image"] for n in APP_SERVICES} == {"gpuplatform:latest"}
    assert services["worker"]["pull_policy"] == services["beat"]["pull_policy"] == "never"
    for name in ("worker", "beat"):  # they start after web built and migrated
        assert services[name]["depends_on"]["web"]["condition"] == "service_healthy"


def test_every_variable_of_the_app_services_is_read_by_the_settings():
    read = set(re.findall(r"environ(?:\.get)?\(?\[?\"([A-Z_]+)\"", (ROOT / "platform/gpuplatform/settings.py").read_text()))
    for name in APP_SERVICES:
        env = compose()["services"][name]["environment"]
        assert set(env) <= read, (name, sorted(set(env) - read))
        assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"] == "redis://redis:6379/0"
        assert env["DJANGO_PRODUCTION"] == "1"


def _argv(service: dict) -> list[str]:
    command = service["command"]
    return command if isinstance(command, list) else shlex.split(command)


def test_web_command_migrates_then_runs_gunicorn_with_valid_options():
    argv = _argv(compose()["services"]["web"])
    assert argv[:2] == ["sh", "-c"]
    steps = [shlex.split(s) for s in argv[2].split("&&")]
    assert steps[0] == ["python", "manage.py", "migrate", "--noinput"] and (ROOT / "manage.py").is_file()
    assert steps[1][0] == "exec"
    gunicorn = steps[1][1:]
    assert gunicorn[0] == "gunicorn" and shutil.which("gunicorn", path=str(Path(sys.executable).parent))
    from gunicorn.config import Config

    options = Config().parser().parse_args(gunicorn[1:])  # gunicorn's own parser: unknown options fail
    assert options.args == ["gpuplatform.wsgi:application"] and options.bind == ["0.0.0.0:8000"]
    assert options.max_requests == 1000 and options.workers == 3
    from gpuplatform.wsgi import application  # the module:variable gunicorn loads

    assert callable(application)


@pytest.mark.parametrize("name", ["worker", "beat"])
def test_celery_commands_exist_and_take_their_options(name):
    argv = _argv(compose()["services"][name])
    assert argv[:3] == ["celery", "-A", "gpuplatform"]
    celery = shutil.which("celery", path=str(Path(sys.executable).parent))
    assert celery
    # the same command line with --help: celery loads the app (-A gpuplatform) and parses the sub-command
    run = subprocess.run([celery, *argv[1:], "--help"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={"PATH": str(Path(sys.executable).parent), "SECRET_KEY": "x",
                                        "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}", "DATABASE_URL": "sqlite:///:memory:",
                                        "REDIS_URL": "redis://127.0.0.1:1/0"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Usage" in run.stdout


def test_healthchecks_hit_what_exists():
    services = compose()["services"]
    web = services["web"]["healthcheck"]["test"]
    assert web[:2] == ["CMD", "python"] and "http://127.0.0.1:8000/healthz" in web[-1]
    compile(web[-1], "healthcheck", "exec")
    from django.urls import resolve

    assert resolve("/healthz").url_name == "healthz"
    assert "celery -A gpuplatform inspect ping" in services["worker"]["healthcheck"]["test"][1]
    assert "$HOSTNAME" in services["worker"]["healthcheck"]["test"][1]  # $$HOSTNAME, left to the shell


def test_dockerfile_copies_what_exists_and_serves_the_composed_port():
    text = (ROOT / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+(?: \S+)*) \S+$", text, re.M):
        for path in src.split():
            assert (ROOT / path).exists(), path
    assert "EXPOSE 8000" in text
    assert "collectstatic" in text and (ROOT / "frontend/static/vendor/plotly-strict.min.js").is_file()


def test_docs_name_only_services_that_exist():
    """`docker compose exec|run|logs <service>` in the README and docs/ name services of the file."""
    services = set(compose()["services"])
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = re.sub(r"\s+", " ", doc.read_text())
        for service in re.findall(r"docker compose (?:exec|run|logs|restart|stop) (?:-\S+ )*([a-z][a-z0-9_-]*)", text):
            assert service in services, (doc.name, service)


def test_the_makefile_header_phony_and_help_list_every_target():
    """The header comment (`# Targets: ...`) and .PHONY name every target the Makefile defines, and `make
    help` describes each one a user runs (venv / install are steps of the others)."""
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", text, re.M))
    assert {"demo", "demo-local", "demo-federation", "browser", "test-fast"} <= targets
    header = set(re.search(r"^# Targets: (.*)\.$", text, re.M).group(1).split())
    phony = set(re.search(r"^\.PHONY: (.*)$", text, re.M).group(1).split())
    helped = set(re.findall(r'@echo "make ([a-z][a-z0-9-]*) ', text))
    assert header == targets and phony == targets
    assert targets - {"help", "venv", "install"} <= helped, targets - helped
