"""Run the node agent: register this node, send heartbeats with GPU health and execute its tasks.

    GPUPLATFORM_AGENT_TOKEN=TOKEN python manage.py gpu_agent --api https://control-plane [--node-name NAME] [--once]
                               [--interval 30] [--nvidia-smi-xml FILE] [--no-exec] [--work-dir DIR]
                               [--address IP] [--runtime docker|podman] [--poll 2] [--gpus K]

Inventory from NVML (nvidia-ml-py) where present, else `nvidia-smi -q -x` (or the given XML file). Unless
--no-exec or --once, the agent polls its assignments and launches, watches, stops and reports each task
(docs/execution.md; gpuplatform/agent/runner.py and executor.py), keeping its state under --work-dir so a
restarted agent adopts the tasks still running. The JSON bodies and endpoints are documented in
gpuplatform/agent/client.py and runner.py. Touches no database.

The API token comes from the environment variable GPUPLATFORM_AGENT_TOKEN (readable only by the agent's
own user, never passed to its tasks), or `--token-file FILE` (a file only its owner may read: mode 0600),
or `--token TOKEN`, which still works but is less safe: a command line is visible to every local user (`ps`).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import threading

from django.core.management.base import BaseCommand, CommandError

from gpuplatform.management import options
from gpuplatform.names import name_error


def _interrupt(signum, frame):
    raise KeyboardInterrupt


TOKEN_ENV = "GPUPLATFORM_AGENT_TOKEN"  # GPUPLATFORM_AGENT_* never reaches a task (agent/executor.py task_env)


def agent_token(flag: str | None, path: str | None) -> str:
    """The agent's API token: --token, else --token-file's first line, else $GPUPLATFORM_AGENT_TOKEN.
    Raises CommandError when none is given, the file cannot be read, is empty, or group or others may read
    it (it must be mode 0600 or stricter)."""
    if flag:
        return flag
    if path:
        try:
            mode = os.stat(path).st_mode
            if mode & 0o077:
                raise CommandError(f"--token-file {path} may be read by other users (mode {mode & 0o777:o}): "
                                   f"chmod 600 {path}")
            with open(path, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except OSError as exc:
            raise CommandError(f"--token-file {path}: {exc.strerror or exc}") from None
        if not token:
            raise CommandError(f"--token-file {path} is empty")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise CommandError(f"no API token: set {TOKEN_ENV} (or --token-file FILE, mode 0600)")
    return token


def stopped_message(name: str, executor) -> str:
    """The agent's last line on SIGINT / SIGTERM, true for its mode (new-user trial 21, F4b: the local demo's agents,
    run with --stop-tasks-on-exit, said their tasks "keep running and are adopted" while their supervisors stopped
    them). `executor`: the agent's ProcessExecutor, or None (--once, --no-exec: it runs no task)."""
    if executor is None:
        return f"{name}: agent stopped (it runs no task)"
    live = len(executor.live_keys())
    if not live:
        return f"{name}: agent stopped; no task of it was running"
    one = live == 1
    tasks = f"its {live} running task{'' if one else 's'}"
    if executor.stop_tasks_on_exit:
        return (f"{name}: agent stopped; {tasks} {'is' if one else 'are'} stopped with it (--stop-tasks-on-exit: "
                f"each supervisor sends SIGTERM, then SIGKILL after {executor.supervisor_grace:g} s)")
    return (f"{name}: agent stopped; {tasks} {'keeps' if one else 'keep'} running and {'is' if one else 'are'} "
            f"adopted at its next start")


class Command(BaseCommand):
    help = "Node agent: register this node's GPUs, send heartbeats and run the node's tasks (REST API)."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--api", required=True, help="base URL of the control plane, e.g. http://127.0.0.1:8000")
        parser.add_argument("--token", default=None,
                            help="API token (sent as 'Authorization: Token ...'). Less safe: other local users see "
                                 "it in `ps`; prefer GPUPLATFORM_AGENT_TOKEN or --token-file")
        parser.add_argument("--token-file", default=None, metavar="FILE",
                            help="read the API token from FILE (mode 0600: refused when group or others may read it)")
        parser.add_argument("--node-name", default=None, help="node name (default: this host's name)")
        parser.add_argument("--once", action="store_true",
                            help="register, send one heartbeat, exit (runs no task)")
        parser.add_argument("--interval", type=options.number(above=0), default=30.0,
                            help="seconds between heartbeats (default 30)")
        parser.add_argument("--nvidia-smi-xml", default=None, help="read `nvidia-smi -q -x` output from this file")
        parser.add_argument("--no-exec", action="store_true",
                            help="inventory and heartbeats only: never fetch assignments nor start a task")
        parser.add_argument("--work-dir", default=None,
                            help="the agent's state and task directories (default ~/.gpuplatform-agent/<node>)")
        parser.add_argument("--address", default=None,
                            help="address other nodes reach this one at, sent at registration "
                                 "(default: this host's primary IP, else 127.0.0.1)")
        parser.add_argument("--runtime", default="", choices=["", "docker", "podman"],
                            help="container runtime for tasks with an image (default none: such tasks end "
                                 "with exit code 125)")
        parser.add_argument("--stop-tasks-on-exit", action="store_true",
                            help="the tasks this agent starts end when it does, however it ends (each task's "
                                 "supervisor watches it); the local demo's agents. Default: tasks outlive the "
                                 "agent and a restarted agent adopts them")
        parser.add_argument("--poll", type=options.number(above=0), default=2.0,
                            help="seconds between assignment polls until the server sends poll_seconds (default 2)")
        parser.add_argument("--telemetry-seconds", type=options.number(minimum=0), default=None,
                            help="seconds between GPU telemetry samples (default settings.TELEMETRY_SECONDS, 10; "
                                 "0 = no telemetry)")
        parser.add_argument("--dcgm-exporter", default=None, metavar="URL",
                            help="read telemetry from this dcgm-exporter /metrics URL instead of NVML")
        parser.add_argument("--gpus", type=options.integer(1), default=None, metavar="K",
                            help="LOCAL DEMO ONLY: report K copies of the first GPU of the inventory (indexes "
                                 "0..K-1, distinct UUIDs derived from its UUID, the node name and the index); "
                                 "they are not real devices")

    def handle(self, *args, **opts):
        from django.conf import settings

        from gpuplatform.agent import AgentError, InventoryError, make_reader, make_telemetry, run_agent
        from gpuplatform.agent.executor import ExecutorError, ProcessExecutor
        from gpuplatform.agent.inventory import demo_copies
        from gpuplatform.agent.runner import primary_address

        if opts["interval"] <= 0:
            raise CommandError("--interval must be > 0")
        if opts["poll"] <= 0:
            raise CommandError("--poll must be > 0")
        if opts["gpus"] is not None and opts["gpus"] < 1:
            raise CommandError("--gpus must be >= 1")
        token = agent_token(opts["token"], opts["token_file"])
        name = opts["node_name"] or socket.gethostname()
        if message := name_error("node", name):  # the server refuses it too; the state directory is named after it
            raise CommandError(f"--node-name {name!r}: {message}"
                               + ("" if opts["node_name"] else " (this host's name; give --node-name NAME)"))
        execute = not (opts["once"] or opts["no_exec"])
        runtime = (opts["runtime"] or "") if execute else ""  # a node that runs nothing offers no runtime
        if runtime and not shutil.which(runtime):
            raise CommandError(f"--runtime {runtime}: no {runtime!r} on PATH")
        address = opts["address"] or primary_address()
        try:
            reader = make_reader(opts["nvidia_smi_xml"])
            if opts["gpus"] is not None:
                real, count = reader, opts["gpus"]
                reader = lambda: demo_copies(real(), count, name)  # noqa: E731
            executor = None
            if execute:
                work_dir = opts["work_dir"] or os.path.join(os.path.expanduser("~"), ".gpuplatform-agent", name)
                executor = ProcessExecutor(work_dir, runtime or None, stop_tasks_on_exit=opts["stop_tasks_on_exit"])
                executor.lock()
                self.stdout.write(f"{name}: executing tasks, state in {executor.work_dir}")
                if threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends the agent cleanly, not its tasks
            seconds = opts["telemetry_seconds"]
            seconds = settings.TELEMETRY_SECONDS if seconds is None else seconds
            telemetry = None
            if seconds > 0 and opts["gpus"] is None:  # demo copies are not real devices: no telemetry for them
                telemetry = make_telemetry(opts["dcgm_exporter"])
            beats = run_agent(opts["api"], token, name, reader, once=opts["once"], interval=opts["interval"],
                              address=address, runtime=runtime, executor=executor, poll=opts["poll"],
                              telemetry=telemetry, telemetry_seconds=seconds or 10.0)
        except (AgentError, InventoryError, ExecutorError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        except KeyboardInterrupt:
            self.stdout.write(stopped_message(name, executor))
            return
        self.stdout.write(f"{name}: registered, {beats} heartbeat(s) sent")
