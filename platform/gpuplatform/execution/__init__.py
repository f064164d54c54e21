"""Execution: what the control plane tells node agents and what it does with their reports
(docs/execution.md, DESIGN section 11). The agent itself is gpuplatform/agent/.

- stops.py: a gang stopped with a deadline (cancel, task failure, success of the completion role, time
  limit, preemption, a fault's survivors: stop_for_fault) and what it ends as; the release step's expiry of
  deadlines and time limits.
- reports.py: a task's process started / exited / was lost, as a node agent reports it.
- assignments.py: a node's tasks with their argv, environment (CUDA_VISIBLE_DEVICES, torchrun's rendezvous
  variables, GPUPLATFORM_*) and the stops it must carry out.
- logs.py: bounded per-task output, appended by agents and read by the API and the job page.
"""
from .assignments import master_port, node_assignments
from .logs import append_log, read_log
from .reports import report_task_event
from .stops import (
    enforce_time_limits, expire_stops, finalize_stop, has_agent_tasks, live_agent_tasks, stop_for_fault, stop_job,
)

__all__ = ["append_log", "enforce_time_limits", "expire_stops", "finalize_stop", "has_agent_tasks",
           "live_agent_tasks", "master_port", "node_assignments", "read_log", "report_task_event", "stop_for_fault",
           "stop_job"]
