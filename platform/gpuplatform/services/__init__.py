"""Every write of the platform (Zulip-style actions): plain functions, one transaction each, audited.

Each function validates first and raises `ValidationError` (a dict field -> rule broken) before writing
anything; any exception rolls the whole call back. Each writes one or more `Event` rows through the
audit writer (audit.py); side effects (asking for a scheduling cycle) run only after commit. Views, the
API, the admin, importers and tasks call these and never `.save()` models themselves. Units: GPUs,
millicores, MiB, seconds.

The modules mirror models/, over a bottom layer every one of them may use and that uses none of them:

    tenancy.py      teams, members, deleting accounts   (models/tenancy.py)
    queues.py       the queue tree and its quotas       (models/queues.py)
    jobs.py         submit, cancel, finish, priority    (models/workloads.py)
    nodes.py        registration, heartbeats, cordon / drain / uncordon (models/cluster.py)
    node_states.py  the node state machine: every node state change, with its transition table
    topology.py     the domain tree from a topology file (models/cluster.py)
    rules.py        admins' diagnosis and health rules  (models/diagnosis.py)
    tokens.py       API tokens: issue (hashed, with an expiry), revoke (knox.AuthToken)
    base.py         raise_if, resolve_queue, request_cycle_on_commit
    ---------------------------------------------------------------------------------------------------
    ../errors.py    ValidationError        ../audit.py   record_event, record_events (every Event row)

Callers use the package: `from gpuplatform import services; services.submit_job(...)`; this module
re-exports the public functions, `ValidationError`, `load_cluster_spec` (cluster_loader.py) and
`report_task_running` (lifecycle.py: a node reports a task running).
"""
from ..cluster_loader import load_cluster_spec
from ..errors import ValidationError
from ..lifecycle import report_task_running
from .base import lock_queue_tree, request_cycle_on_commit
from .jobs import cancel_job, finish_job, set_job_priority, submit_job
from ..diagnosis.health import record_validation, start_repair, start_validation
from .nodes import (
    cordon_node, drain_node, follow_node_rename, issue_node_agent_token, record_heartbeat, register_node, set_gpu_sharing, set_node_gpu_sharing,
    set_spare, uncordon_node,
)
from .rules import save_diagnosis_rule, save_health_rule
from .queues import (QUEUE_NAME_RULE, create_queue, delete_queue, queue_clashes, queue_grace_error, queue_name_taken,
                     queue_named, queue_version, queue_weight_error, quota_version, set_quota, update_queue)
from .reschedule import request_moves
from .tenancy import (add_member, create_team, delete_team, delete_user, history_refusal, remove_member,
                      update_team, user_history)
from .tokens import issue_api_token, revoke_api_tokens
from .topology import TopologyPlan, apply_topology, plan_topology, topology_from_db

__all__ = [
    "ValidationError", "request_cycle_on_commit", "lock_queue_tree",
    "create_team", "update_team", "delete_team", "add_member", "remove_member", "delete_user", "user_history",
    "history_refusal",
    "QUEUE_NAME_RULE", "queue_clashes", "queue_name_taken", "queue_named",
    "create_queue", "update_queue", "set_quota", "delete_queue", "queue_grace_error", "queue_weight_error",
    "queue_version", "quota_version",
    "submit_job", "cancel_job", "finish_job", "set_job_priority", "report_task_running",
    "register_node", "record_heartbeat", "cordon_node", "drain_node", "uncordon_node", "issue_node_agent_token", "follow_node_rename", "set_spare",
    "set_gpu_sharing", "set_node_gpu_sharing",
    "start_repair", "start_validation", "record_validation", "save_diagnosis_rule", "save_health_rule",
    "TopologyPlan", "plan_topology", "apply_topology", "topology_from_db",
    "load_cluster_spec", "request_moves",
]
