"""What the headline cycle's task and job updates cost with fewer indexes (issue 16, session 24; RESULTS.md "Where the
end-to-end cycle's last 0.3 s would have to come from"): on the headline world, the apply's own bulk updates (10,353
tasks: node_id, state; 10,000 jobs: the bind's columns) timed REPS times each, rolled back, then again after each of
the task and job tables' secondary indexes is dropped in turn (the benchmark's own database only).

    BENCH_DB=<db> REPS=3 python benchmarks/e2e24_row_cost.py
"""
from __future__ import annotations

import os
import time

import _db


def main() -> None:
    with _db.bench_database("bench_e2e24_row_cost"):
        _db.load_world(_db.ab_world("headline"))
        from django.db import connection, transaction

        from gpuplatform.bulk import _update_sql
        from gpuplatform.models import Job, Node, Task
        from gpuplatform.scheduling.store import bind_fields

        clock, result = _db.one_engine_result()
        job_ids = [b.job_id for b in result.bindings]
        tasks = list(Task.objects.filter(job_id__in=job_ids, state="pending").values_list("id", "job_id"))
        nodes = list(Node.objects.values_list("id", flat=True))
        statements = {
            "task": _update_sql(Task, [(t, nodes[i % len(nodes)], "running", j) for i, (t, j) in enumerate(tasks)],
                                ["node_id", "state"], {}, {}, ("job_id",)),
            "job": _update_sql(Job, [(j, "", None, "running", clock) for j in job_ids],
                               ["placement_domain", "placement_tier", "state", "started_at"], bind_fields(clock), {},
                               ()),
        }

        def run(label: str) -> None:
            for _ in range(int(os.environ.get("REPS", "3"))):
                took = []
                with transaction.atomic():
                    for name, (sql, params) in statements.items():
                        with connection.cursor() as cur:
                            t = time.perf_counter()
                            cur.execute(sql, params)
                            took.append(f"{name} {cur.rowcount} rows {time.perf_counter() - t:.3f} s")
                    transaction.set_rollback(True)
                print(f"{label:24} " + ", ".join(took), flush=True)

        run("every index")
        with connection.cursor() as cur:
            cur.execute("SELECT tablename, indexname FROM pg_indexes WHERE tablename IN "
                        "('gpuplatform_task', 'gpuplatform_job') AND indexname NOT LIKE '%%_pkey' "
                        "AND indexdef NOT LIKE 'CREATE UNIQUE%%' ORDER BY tablename, indexname")
            secondary = cur.fetchall()
        for table, index in secondary:
            with connection.cursor() as cur:
                cur.execute(f'DROP INDEX "{index}"')
            run(f"- {index}"[:24])


if __name__ == "__main__":
    main()
