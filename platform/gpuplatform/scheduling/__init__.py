"""The database side of a scheduling cycle: the platform's half of the one-way stairs.

The engine (`scheduler.core`) is pure: it turns a frozen Snapshot into decisions and knows nothing of
Django. This package reads the database into that Snapshot and writes the decisions back, and holds what
runs around a cycle:

- `store`        ORM -> Snapshot in one read, CycleResult -> ORM in one write; `run_cycle_once`
- `evict`        the eviction half of the write: evictions, holds, backfill estimates, audit decisions
- `release`      the release step at the start of every cycle (grace periods, gang-start and time limits)
- `failures`     node and GPU failure detection (heartbeats, unhealthy GPUs, draining nodes)
- `samples`      the per-cycle time series for the dashboards
- `usage_decay`  decayed queue usage for fair-share ordering with memory
- `locks`        the cycle's single-flight lock and the queue tree's lock
- `tasks`        the Celery tasks (beat and workers know them by name), `request_cycle`, the in-process loop

Imports run one way: this package imports `scheduler.core`; nothing under `scheduler/` imports the
platform (tests/test_one_way_imports.py checks it).
"""
