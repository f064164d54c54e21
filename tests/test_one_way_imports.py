"""The one-way stairs (docs/architecture.md): `gpuplatform` -> `scheduler` -> `clusterspec`, imports never go back up.

- Every module under scheduler/ and clusterspec/ imports in a fresh interpreter without pulling in Django
  or Celery (or the platform): the engine, the simulator and the importers run with no database.
- No module under scheduler/ imports the platform (`gpuplatform`, `frontend`) or Django / Celery, and
  clusterspec/ imports neither the platform nor the scheduler: read from the source with `ast`, so an
  import hidden inside a function (which the first check would never run) is caught too.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PURE_PACKAGES = ("scheduler", "clusterspec")
SERVER_SIDE = ("django", "celery", "kombu", "rest_framework", "gpuplatform", "frontend")
# What each pure package may not import, by top-level name.
FORBIDDEN = {
    "scheduler": SERVER_SIDE,
    "clusterspec": SERVER_SIDE + ("scheduler",),
}


def _modules(package: str) -> list[str]:
    names = []
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def test_the_pure_packages_have_modules():
    assert "scheduler.core" in _modules("scheduler") and "scheduler.sim" in _modules("scheduler")
    assert "clusterspec.spec" in _modules("clusterspec")
    assert "clusterspec.importers.philly" in _modules("clusterspec")


_PROBE = r"""
import importlib, json, sys
server_side = tuple(sys.argv[2].split(","))
def loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in server_side)
report = {"before": loaded(), "pulled": {}, "failed": {}}
for name in sys.argv[1].split(","):
    before = set(loaded())
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - reported below
        report["failed"][name] = f"{type(exc).__name__}: {exc}"
        continue
    new = sorted(set(loaded()) - before)
    if new:
        report["pulled"][name] = sorted({m.split(".")[0] for m in new})
print(json.dumps(report))
"""


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_every_module_imports_without_django_or_celery(package):
    """Import every module of the package in a fresh interpreter (no DJANGO_SETTINGS_MODULE, Django absent
    from sys.modules) and name each module whose import pulled in Django, Celery or the platform."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONSTARTUP")}
    # platform/ on the path too: an import of gpuplatform must succeed to be seen pulling Django in.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "platform")])
    out = subprocess.run([sys.executable, "-c", _PROBE, ",".join(_modules(package)), ",".join(SERVER_SIDE)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["before"] == [], f"loaded before any import: {report['before']}"
    assert report["failed"] == {}, report["failed"]
    assert report["pulled"] == {}, f"these modules pull in the server side: {report['pulled']}"


def _imports(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """Every module name imported anywhere in the tree (module level, functions, try blocks), with relative
    imports resolved against `module`, plus importlib.import_module("...") / __import__("...") literals."""
    package = module.split(".")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `module` names its file, so a package's own is "pkg.__init__": one rule for both
                base = package[:len(package) - node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return found


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_no_module_imports_upward(package):
    """Read every module's source: scheduler/ never imports the platform (gpuplatform, frontend) nor Django
    or Celery, not even lazily inside a function; clusterspec/ imports neither the platform nor scheduler."""
    forbidden = FORBIDDEN[package]
    wrong = []
    for path in sorted((REPO / package).rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for line, name in _imports(ast.parse(path.read_text(), filename=str(path)), module):
            if name.split(".")[0] in forbidden:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not wrong, "imports against the one-way stairs:\n" + "\n".join(wrong)


def test_the_scan_sees_lazy_and_relative_imports():
    """The scanner itself: an import inside a function, a relative import and import_module are all seen."""
    source = ("def f():\n    from gpuplatform.models import Job\n"
              "from ..x import y\nimport importlib\nimportlib.import_module('django.db')\n")
    names = sorted(n for _, n in _imports(ast.parse(source), "scheduler.sim.replay"))
    assert names == ["django.db", "gpuplatform.models", "importlib", "scheduler.x"]
    assert [n for _, n in _imports(ast.parse("from . import cycle"), "scheduler.core.__init__")] == ["scheduler.core"]
