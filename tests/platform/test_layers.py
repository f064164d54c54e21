"""Facts written once, checked on the source (ast, no imports): every Event row is written by the audit
writer (gpuplatform/audit.py), every Allocation row by gpuplatform/allocations.py, and every node state change by
the node state machine (gpuplatform/services/node_states.py)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("platform/gpuplatform", "frontend", "scheduler")
AUDIT = "platform/gpuplatform/audit.py"
NODE_STATES = "platform/gpuplatform/services/node_states.py"
ALLOCATIONS = "platform/gpuplatform/allocations.py"
WRITES = {"create", "bulk_create", "get_or_create", "update_or_create", "update", "bulk_update"}


def _modules():
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/migrations/" not in rel:
                yield rel, ast.parse(path.read_text(), filename=rel)


def _manager_model(func) -> str | None:
    """`Model` of a call `Model.objects.<write>(...)` or `Model.objects.<...>.<write>(...)`, else None."""
    if not (isinstance(func, ast.Attribute) and func.attr in WRITES):
        return None
    node = func.value
    while isinstance(node, (ast.Call, ast.Attribute)):
        if isinstance(node, ast.Attribute) and node.attr == "objects" and isinstance(node.value, ast.Name):
            return node.value.id
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def _calls(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_every_event_is_written_by_the_audit_writer():
    found = []
    for rel, tree in _modules():
        if rel in (AUDIT, "platform/gpuplatform/models/events.py"):
            continue
        for call in _calls(tree):
            func = call.func
            if _manager_model(func) == "Event":
                found.append(f"{rel}:{call.lineno} Event.objects.{func.attr}")
            elif isinstance(func, ast.Name) and func.id == "Event" and not call.args and call.keywords:
                found.append(f"{rel}:{call.lineno} Event(...) built for a bulk write")
            elif (isinstance(func, (ast.Name, ast.Attribute)) and getattr(func, "id", getattr(func, "attr", "")) in
                  ("insert_rows", "_insert_rows") and call.args and isinstance(call.args[0], ast.Name)
                  and call.args[0].id == "Event"):
                found.append(f"{rel}:{call.lineno} insert_rows(Event, ...)")
    assert not found, "Events written outside gpuplatform/audit.py:\n" + "\n".join(found)


def test_every_allocation_is_written_by_the_allocation_writer():
    """allocation.task_id / gpu_id / job_id have no database constraint (migration 0023_e2e9): the one writer checks
    them, so no other module may create Allocation rows or change those columns."""
    found = []
    for rel, tree in _modules():
        if rel in (ALLOCATIONS, "platform/gpuplatform/models/workloads.py"):
            continue
        for call in _calls(tree):
            func = call.func
            if _manager_model(func) == "Allocation" and (func.attr != "update" or any(
                    k.arg in ("task", "task_id", "gpu", "gpu_id", "job", "job_id") for k in call.keywords)):
                found.append(f"{rel}:{call.lineno} Allocation.objects.{func.attr}")
            elif isinstance(func, ast.Name) and func.id == "Allocation" and call.keywords:
                found.append(f"{rel}:{call.lineno} Allocation(...) built")
            elif (isinstance(func, (ast.Name, ast.Attribute)) and getattr(func, "id", getattr(func, "attr", "")) in
                  ("insert_rows", "copy_rows") and call.args and isinstance(call.args[0], ast.Name)
                  and call.args[0].id == "Allocation"):
                found.append(f"{rel}:{call.lineno} {getattr(func, 'id', getattr(func, 'attr', ''))}(Allocation, ...)")
    assert not found, "Allocations written outside gpuplatform/allocations.py:\n" + "\n".join(found)


def test_every_node_state_change_goes_through_the_state_machine():
    found = []
    for rel, tree in _modules():
        if rel == NODE_STATES:
            continue
        for call in _calls(tree):
            if _manager_model(call.func) == "Node" and any(k.arg in ("state", "resume_state") for k in call.keywords):
                found.append(f"{rel}:{call.lineno} Node.objects...{call.func.attr}(state=...)")
    assert not found, "node states written outside gpuplatform/services/node_states.py:\n" + "\n".join(found)
