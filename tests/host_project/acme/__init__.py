"""Acme Finance: the project's Celery app is loaded with Django (Switchyard's tasks are
``shared_task``s and bind to it)."""

from acme.celery import app as celery_app

__all__ = ["celery_app"]
