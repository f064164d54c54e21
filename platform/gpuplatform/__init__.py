"""The GPU platform's Django project and domain (teams, queues, cluster, workloads, events)."""
from .celery import app as celery_app

__all__ = ["celery_app"]
