"""Helpers shared by the API tests."""
from __future__ import annotations


def job_body(name="job", queue="alpha", tasks=1, gpus=1, **extra) -> dict:
    return {"name": name, "queue": queue, "command": "sleep 3600", "roles": [{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}], **extra}


def table_counts() -> dict[str, int]:
    """Row counts of every platform table (the 'nothing is stored' check)."""
    from django.apps import apps

    return {m.__name__: m.objects.count() for m in apps.get_app_config("gpuplatform").get_models()}
