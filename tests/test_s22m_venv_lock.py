"""`make demo` and `make demo-local` started together on a fresh clone raced on the venv (trial 22, F1): both ran
`python -m venv` and `pip install -e .[dev]` into .venv at once. The Makefile's venv and install steps run
through .ci/venv.py, which holds a lock on the venv; the run that waited uses the venv the other finished.
These tests drive the helper itself (two real processes), not a real pip install."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / ".ci" / "venv.py"


def helper():
    spec = importlib.util.spec_from_file_location("ci_venv", HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_venv(tmp_path) -> Path:
    """A venv whose bin/python is this interpreter (creating a real one is not what is tested)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


def test_a_second_holder_waits_for_the_first(tmp_path):
    lock = tmp_path / "venv" / ".install.lock"
    said = []
    waiter = [sys.executable, "-c",
              "import sys, importlib.util as u; s = u.spec_from_file_location('v', sys.argv[1]); m = u.module_from_spec(s);"
              " s.loader.exec_module(m)\nwith m.hold(sys.argv[2], poll_seconds=0.05): print('got it', flush=True)",
              str(HELPER), str(lock)]
    with helper().hold(lock, say=said.append):
        assert f"(pid {os.getpid()})" in lock.read_text()
        second = subprocess.Popen(waiter, stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        assert second.poll() is None, "the second holder did not wait"
    out, _ = second.communicate(timeout=20)
    assert second.returncode == 0
    assert out.splitlines() == [f"waiting for make install (pid {os.getpid()}) to finish with {lock.parent} ...",
                                "got it"], out
    assert said == []


def test_two_concurrent_installs_run_the_install_once_and_both_succeed(tmp_path):
    venv = fake_venv(tmp_path)
    requires = tmp_path / "pyproject.toml"
    requires.write_text("[project]\n")
    stamp = venv / ".installed"
    log = tmp_path / "installs.log"
    slow_install = f"import time; time.sleep(1.5); open({str(log)!r}, 'a').write('install\\n')"
    argv = [sys.executable, str(HELPER), str(venv), str(stamp), "--after", str(requires), "--", "-c", slow_install]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.4)
    second = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outs = [p.communicate(timeout=60)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    assert log.read_text() == "install\n", "the install ran twice (or not at all)"
    assert stamp.exists()
    assert re.search(r"waiting for make install \(pid \d+\) to finish", outs[1]), outs
    assert "is already installed" in outs[1], outs


def test_a_stale_stamp_installs_again_and_a_failed_install_leaves_no_stamp(tmp_path):
    module = helper()
    venv = fake_venv(tmp_path)
    requires = tmp_path / "pyproject.toml"
    requires.write_text("[project]\n")
    stamp = venv / ".installed"
    ran = []
    assert module.ensure(venv, stamp, ["-c", "pass"], after=[requires], run=ran.append, say=lambda m: None)
    assert module.ensure(venv, stamp, ["-c", "pass"], after=[requires], run=ran.append, say=lambda m: None) is False
    assert len(ran) == 1
    later = stamp.stat().st_mtime + 5
    os.utime(requires, (later, later))  # pyproject.toml changed after the install
    assert module.ensure(venv, stamp, ["-c", "pass"], after=[requires], run=ran.append, say=lambda m: None)
    assert len(ran) == 2

    stamp.unlink()
    failing = [sys.executable, str(HELPER), str(venv), str(stamp), "--after", str(requires), "--", "-c",
               "raise SystemExit(3)"]
    assert subprocess.run(failing, capture_output=True).returncode == 3
    assert not stamp.exists()


def test_the_makefile_runs_venv_creation_and_every_install_through_the_lock():
    text = (ROOT / "Makefile").read_text()
    assert "-m venv" not in text.replace(".ci/venv.py", "")
    installs = re.findall(r"^\t(.*pip install -q -e .*)$", text, re.M)
    assert len(installs) == 2 and all(line.startswith("$(PYTHON) .ci/venv.py $(VENV) ") for line in installs), installs
    assert re.search(r"^\$\(PY\):\n\t\$\(PYTHON\) \.ci/venv\.py \$\(VENV\)$", text, re.M)
