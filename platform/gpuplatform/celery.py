"""Celery application: broker from REDIS_URL; tasks live in gpuplatform/scheduling/tasks.py."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")

app = Celery("gpuplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["gpuplatform.scheduling", "gpuplatform.telemetry", "gpuplatform.federation"])
