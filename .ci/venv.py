"""Create the virtualenv and install into it, one run at a time (the Makefile's `venv` and `install` steps).

`make demo` and `make demo-local` started together on a fresh clone both found .venv missing or stale and ran
`python -m venv` and `pip install -e .[dev]` into it at once: one failed, or the venv was left half written.
Each step now runs under an exclusive lock (VENV/.install.lock, fcntl.flock: the kernel drops it when its
holder exits, so a killed run leaves no stale lock). The run that waited looks again once it holds the lock:
if the first run finished the step (the stamp is newer than every file it depends on), it uses that venv and
does nothing. Needs only the python3 of a fresh machine (the standard library; no flock(1)).

    python3 .ci/venv.py VENV                              create VENV if it has no bin/python
    python3 .ci/venv.py VENV STAMP [--after F ...] -- ARG...
        create VENV if needed, then run VENV/bin/python ARG... and touch STAMP, unless STAMP is already newer
        than each --after file (default: pyproject.toml)
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

LOCK_NAME = ".install.lock"


def _say(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def hold(lock_path, *, say=_say, poll_seconds: float = 0.2):
    """Hold an exclusive lock on lock_path for the block; wait while another process holds it, saying so once."""
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another run"
            say(f"waiting for {holder} to finish with {lock_path.parent} ...")
            while True:  # a blocking flock would not wake on Ctrl-C before the holder ends
                time.sleep(poll_seconds)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    continue
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"make install (pid {os.getpid()})\n")
            handle.flush()
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


def venv_python(venv) -> Path:
    return Path(venv) / "bin" / "python"


def is_fresh(stamp, after) -> bool:
    """The stamp exists and is at least as new as every file it was made from."""
    try:
        made = Path(stamp).stat().st_mtime
    except FileNotFoundError:
        return False
    return all(made >= Path(f).stat().st_mtime for f in after)


def ensure(venv, stamp=None, command=(), *, after=("pyproject.toml",), base_python=sys.executable,
           run=subprocess.check_call, say=_say) -> bool:
    """Under the venv's lock: create the venv if it has no interpreter, then (with a stamp) run the venv's
    python with `command` and touch the stamp unless it is fresh. True when this call did the work."""
    venv = Path(venv)
    with hold(venv / LOCK_NAME, say=say):
        did = False
        if not venv_python(venv).exists():
            run([base_python, "-m", "venv", str(venv)])
            did = True
        if stamp is None:
            return did
        if is_fresh(stamp, after):
            if not did:
                say(f"{venv} is already installed ({stamp} is up to date)")
            return did
        run([str(venv_python(venv)), *command])
        Path(stamp).touch()
        return True


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(prog=".ci/venv.py", description=__doc__.splitlines()[0])
    parser.add_argument("venv")
    parser.add_argument("stamp", nargs="?")
    parser.add_argument("--after", action="append", help="a file the stamp must be newer than (repeatable)")
    args = parser.parse_args(argv)
    if args.stamp and not command:
        parser.error("a stamp needs the command to run after --")
    try:
        ensure(args.venv, args.stamp, command, after=args.after or ("pyproject.toml",))
    except subprocess.CalledProcessError as failed:
        return failed.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
