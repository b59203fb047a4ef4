"""The host's own Celery app: Django's ``CELERY_*`` settings, tasks of every installed app."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "acme.settings")

app = Celery("acme")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
