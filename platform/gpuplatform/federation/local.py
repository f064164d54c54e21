"""`python manage.py demo --federation N` (`make demo-federation`): a manager and N workers on loopback.

Each worker is `manage.py demo --local-agents 2` in a subprocess: its own SQLite database
(.demo-federation/worker-<i>.sqlite3; FEDERATION_DEMO_DIR moves the folder), web server on --port + 1 + i, scheduling loop and two local node agents
that run the jobs' processes (agent directories .demo-federation/agents-<i>), team and queue `demo`. Once it
answers, its `federation-manager` service account and token are made (on its database). This process is the
manager: its own database (the command's DATABASE_URL; the make target uses db-federation.sqlite3), team
`demo` with queue `demo` (federation quota: every worker's GPUs), users admin and demo (--password), the
members registered (their tokens encrypted), pages and API on --port, and the federation round every 2 s.
Ctrl-C (or --duration-seconds) stops the round, the server and every worker (each stops its agents and tasks);
then the tasks left under a worker that died before are stopped too, and the last line says whether anything
still runs (checked). A manager killed with SIGKILL takes its workers with it (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings

from gpuplatform.agent.local import _exit_with_parent

SERVICE_SETUP = """
from gpuplatform.federation.worker_api import make_service_account
print("TOKEN=" + make_service_account()[1])
"""


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/api/v1/federation/member/summary/", timeout=2)
    except urllib.error.HTTPError:
        return True  # 401/403: the server is up
    except OSError:
        return False
    return True


def _manager_setup(password: str, gpus: int):
    from gpuplatform.management.commands.demo import ensure_demo_team

    ensure_demo_team(password, gpus)


def run(cmd, opts) -> None:
    """The federation demo (module docstring). `cmd`: the demo Command (for _migrate and _say)."""
    from gpuplatform.models import MemberCluster
    from . import manager
    from .dispatch import run_round

    n = opts["federation"]
    password = opts["password"] or secrets.token_urlsafe(9)
    root = Path(os.environ.get("FEDERATION_DEMO_DIR") or Path(settings.BASE_DIR) / ".demo-federation")
    root.mkdir(exist_ok=True)
    cmd._hold_database(opts)  # the manager's database, as every demo mode holds its own (demo_hold)
    cmd._migrate()
    workers, procs = [], []
    stop = threading.Event()
    rounder: threading.Thread | None = None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        for i in range(n):
            port = opts["port"] + 1 + i
            env = {**os.environ, "DATABASE_URL": f"sqlite:///{root / f'worker-{i}.sqlite3'}", "REDIS_URL": "",
                   "FEDERATION_ROLE": "worker", "DEMO_AGENTS_DIR": str(root / f"agents-{i}"),
                   "DEMO_PASSWORD": password}  # not on the worker's command line, which every user's ps shows
            env.pop("DEMO_DB_VARIABLE", None)  # a worker's database is the manager's choice, not a make variable
            args = [sys.executable, "manage.py", "demo", "--local-agents", str(opts["local_agents"] or 2),
                    "--gpus-per-agent", str(opts["gpus_per_agent"]), "--port", str(port)]
            if opts["duration_seconds"] is not None:
                args += ["--duration-seconds", str(opts["duration_seconds"] + 30)]
            log = open(root / f"worker-{i}.log", "ab")
            # A worker gets SIGTERM when this process dies, however (it then stops its agents, whose tasks end
            # with them): a killed manager leaves nothing running.
            procs.append(subprocess.Popen(args, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          preexec_fn=_exit_with_parent))
            workers.append((f"worker-{i}", f"http://127.0.0.1:{port}", env))
        deadline = time.monotonic() + 180
        for (name, url, env), proc in zip(workers, procs):
            while not _answers(url):
                if proc.poll() is not None or time.monotonic() > deadline or stop.is_set():
                    raise RuntimeError(f"{name} did not start: see {root / (name + '.log')}")
                time.sleep(0.5)
            made = subprocess.run([sys.executable, "manage.py", "shell", "-c", SERVICE_SETUP], cwd=settings.BASE_DIR,
                                  env=env, check=True, capture_output=True, text=True, timeout=120)
            key = made.stdout.split("TOKEN=", 1)[1].split()[0]
            existing = MemberCluster.objects.filter(name=name).first()
            if existing is None:
                manager.register_cluster(name=name, api_url=url, token=key, labels={"site": f"site-{name[-1]}"},
                                         cost_per_gpu_hour=1.0 + int(name[-1]))
            else:
                manager.update_cluster(existing, api_url=url, token=key)
            cmd._say(f"{name} answers on {url} (log {root / (name + '.log')})")
        _manager_setup(password, n * (opts["local_agents"] or 2) * opts["gpus_per_agent"])
        from gpuplatform.management.commands.demo import start_server

        settings.FEDERATION_ROLE = "manager"  # this process is the manager: its form, jobs API and gpuctl federate
        server = start_server(opts["host"], opts["port"])
        api = f"http://127.0.0.1:{opts['port']}"

        def rounds():
            from django.db import close_old_connections

            while not stop.is_set():
                try:
                    run_round()
                except Exception:  # noqa: BLE001 - logged; the next round retries
                    import logging

                    logging.getLogger("gpuplatform.federation").exception("federation round failed")
                finally:
                    close_old_connections()
                stop.wait(2.0)

        rounder = threading.Thread(target=rounds, name="federation-round", daemon=True)
        rounder.start()
        example = Path(settings.BASE_DIR) / "examples" / "rendezvous.py"
        from gpuplatform.management.commands.demo import demo_submit_queue, token_line

        queue, note = demo_submit_queue()  # an open queue of team demo (a closed one is never named: trial 21, F14)
        if queue is None:
            note = (f"no queue of team demo takes jobs now ({note}): reopen queue demo as admin (web admin, Queues) "
                    f"before submitting")
        elif note:
            note = f"queue {queue}, of team demo: {note}"
        cmd._say("\n".join([
            "", "=" * 72, f"Federation: manager on {api}/federation/ with {n} workers ("
            + ", ".join(u for _, u, _ in workers) + ")",
            f"Log in as admin or demo (password {password}) on the manager or any worker.", "",
            f"Submit to the manager (the form at {api}/jobs/new/, gpuctl --api {api}, or REST); it places the job on "
            "one worker:",
            token_line(api, password, "TOKEN", export=False),
            *([f"  curl -s -H \"Authorization: Token $TOKEN\" -H 'Content-Type: application/json' "
               f"{api}/api/v1/jobs/ -d '{{\"name\": \"hello\", \"queue\": \"{queue}\", \"command\": "
               f"[\"{sys.executable}\", \"{example}\", \"--sleep\", \"60\"], \"roles\": [{{\"name\": \"worker\", "
               f"\"tasks\": 2, \"gpus_per_task\": 1}}]}}'"] if queue else []),
            *([f"  ({note})"] if note else []),
            f"  curl -s -H \"Authorization: Token $TOKEN\" {api}/api/v1/federation/clusters/",
            "Ctrl-C stops the manager and every worker.", "=" * 72, ""]))
        began = time.monotonic()
        while not stop.is_set():
            stop.wait(1.0)
            if opts["duration_seconds"] is not None and time.monotonic() - began > opts["duration_seconds"]:
                break
        stop.set()
        server.shutdown()
        server.server_close()
    finally:
        stop.set()
        if rounder is not None:
            rounder.join(timeout=30)  # a round under way ends before the demo does (it writes)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # A worker that died (or was killed) before this stop never stopped its agents' tasks: stop what is left
        # under every worker's agent directories, then check (new-user trial 14, F6).
        from gpuplatform.agent.local import leftover_processes, stop_tasks_in
        from gpuplatform.management.commands.demo import local_stop_message

        dirs = [d for i in range(n) if (root / f"agents-{i}").is_dir()
                for d in sorted((root / f"agents-{i}").iterdir()) if d.is_dir()]
        stop_tasks_in(dirs, grace=5.0)
        left = sorted(set(leftover_processes([], work_dirs=dirs)) | {p.pid for p in procs if p.poll() is None})
        cmd._say(local_stop_message("federation demo", None, left))
