"""Celery: the manager's round every FEDERATION_SYNC_SECONDS (beat entry "federation-round", manager only)."""
from celery import shared_task

RUN_ROUND = "federation.tasks.run_round"


@shared_task(name=RUN_ROUND, ignore_result=True)
def run_round() -> dict:
    from .dispatch import run_round as go

    return go()
