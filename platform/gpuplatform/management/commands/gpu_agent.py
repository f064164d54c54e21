"""Run the node agent: register this node and send heartbeats with GPU health.

    python manage.py gpu_agent --api https://control-plane --token TOKEN [--node-name NAME] [--once]
                               [--interval 30] [--nvidia-smi-xml FILE]

Inventory from NVML (nvidia-ml-py) where present, else `nvidia-smi -q -x` (or the given XML file). The JSON
bodies and endpoints are documented in gpuplatform/agent/client.py. Touches no database.
"""
from __future__ import annotations

import socket

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Node agent: register this node's GPUs and send heartbeats to the REST API."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--api", required=True, help="base URL of the control plane, e.g. http://127.0.0.1:8000")
        parser.add_argument("--token", required=True, help="API token (sent as 'Authorization: Token ...')")
        parser.add_argument("--node-name", default=None, help="node name (default: this host's name)")
        parser.add_argument("--once", action="store_true", help="register, send one heartbeat, exit")
        parser.add_argument("--interval", type=float, default=30.0, help="seconds between heartbeats (default 30)")
        parser.add_argument("--nvidia-smi-xml", default=None, help="read `nvidia-smi -q -x` output from this file")

    def handle(self, *args, **opts):
        from gpuplatform.agent import AgentError, InventoryError, make_reader, run_agent

        if opts["interval"] <= 0:
            raise CommandError("--interval must be > 0")
        name = opts["node_name"] or socket.gethostname()
        try:
            reader = make_reader(opts["nvidia_smi_xml"])
            beats = run_agent(opts["api"], opts["token"], name, reader, once=opts["once"], interval=opts["interval"])
        except (AgentError, InventoryError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{name}: registered, {beats} heartbeat(s) sent")
