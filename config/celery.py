"""The Celery app. Celery is transport only: tasks carry ids, the database is the truth."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("switchyard")
app.config_from_object("config.celery_conf:CONF", namespace="CELERY")  # Django's CELERY_* settings
app.autodiscover_tasks()
