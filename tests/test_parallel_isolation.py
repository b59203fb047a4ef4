"""The suite across cores (pytest-xdist): each worker process has its own database and its own
broker, so one worker's Celery processes never take another's messages (config/testing.py)."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.db import connection

from config import testing


def test_outside_xdist_nothing_changes() -> None:
    environ = {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}
    testing.isolate_xdist_broker(environ)
    assert environ == {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}


@pytest.mark.parametrize(
    ("worker", "configured", "expected"),
    [
        ("gw0", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("gw1", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
        ("gw2", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379/2"),
        ("gw1", "redis://:secret@127.0.0.1:6380/4", "redis://:secret@127.0.0.1:6380/5"),
        ("gw1", "amqp://guest:guest@127.0.0.1:5672//", "amqp://guest:guest@127.0.0.1:5672//"),
    ],
)
def test_each_worker_takes_the_next_redis_database(worker: str, configured: str, expected: str) -> None:
    environ = {"PYTEST_XDIST_WORKER": worker, "CELERY_BROKER_URL": configured}
    testing.isolate_xdist_broker(environ)
    assert environ["CELERY_BROKER_URL"] == expected


def test_each_worker_has_a_broker_folder_of_its_own_on_the_embedded_broker() -> None:
    environ = {"PYTEST_XDIST_WORKER": "gw3"}
    testing.isolate_xdist_broker(environ)
    assert environ[testing.BROKER_FOLDER_VARIABLE] == "broker-gw3"


@pytest.mark.django_db
def test_this_process_uses_its_own_database_and_broker() -> None:
    """Whatever this run is (one process or several), the settings the suite's Celery worker
    inherits name this process's database and broker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    name = connection.settings_dict["NAME"]
    if worker is None:
        assert not name.endswith(("_gw0", "_gw1"))
        return
    assert name.endswith(f"_{worker}")
    if settings.EMBEDDED_BROKER:
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        assert f"broker-{worker}" in folder
        assert os.environ[testing.BROKER_FOLDER_VARIABLE] == f"broker-{worker}"
    else:
        assert os.environ["CELERY_BROKER_URL"] == settings.CELERY_BROKER_URL
