"""A ``--pool=solo`` worker runs wake-ups inline (``workflows.strategy``): the run goes
through its segments as with Celery's own strategy, a message the inline path does not take
(an ETA) still runs through Celery's, and a failing wake-up is logged and does not stop the
worker.

The solo worker consumes a queue of its own, and the wake-ups of this module's runs are sent
there (the suite's prefork worker, when it runs, never sees them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ops import ORDER
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import wakeups
from workflows.models import Run

pytestmark = [
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

QUEUE = f"switchyard-solo-test-{os.getpid()}"
# Celery's strategy logs every message it hands to the pool at INFO: "Task <name>[<id>] received"
RECEIVED = re.compile(r"Task workflows\.run\[[0-9a-f-]+\] received")


@pytest.fixture(scope="module")
def solo_worker(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryProcesses]:
    from django.db import connection

    env = {**os.environ, "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"]}
    worker = CeleryProcesses(env, tmp_path_factory.mktemp("solo"), concurrency=1, pool="solo", queue=QUEUE)
    try:
        worker.start_worker()
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def wake_ups_to_the_solo_worker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """This process's wake-ups go to the solo worker's queue (as plain messages due now)."""
    sent: list[str] = []

    def notify(items: list[tuple[str, Any]]) -> None:
        for run_id, _ in items:
            tasks.run_instance.apply_async(args=[run_id], queue=QUEUE)
            sent.append(run_id)

    monkeypatch.setattr(wakeups, "_notifier", notify)
    return sent


def _status(run_id: str) -> str:
    return Run.objects.get(pk=run_id).status


def test_a_solo_worker_runs_wake_ups_inline(
    solo_worker: CeleryProcesses, wake_ups_to_the_solo_worker: list[str], deploy: Any
) -> None:
    deploy(ORDER)
    recorded = operations.start(definition_id="order-signal", payload={"order": "S-1"})
    eventually(
        lambda: _status(recorded.run_id) == "WAITING", timeout=30, what="the run to wait", details=solo_worker.logs
    )
    operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 3})
    eventually(
        lambda: _status(recorded.run_id) == "COMPLETED",
        timeout=30,
        what="the run to complete",
        details=solo_worker.logs,
    )

    assert wake_ups_to_the_solo_worker == [recorded.run_id, recorded.run_id]
    assert Run.objects.get(pk=recorded.run_id).state["paid"] == 3
    # neither message went through Celery's request and pool machinery
    assert not RECEIVED.search(solo_worker.logs()), solo_worker.logs()


def test_a_message_with_an_eta_runs_through_celerys_strategy(
    solo_worker: CeleryProcesses, monkeypatch: pytest.MonkeyPatch, deploy: Any
) -> None:
    deploy(ORDER)
    monkeypatch.setattr(wakeups, "_notifier", lambda items: None)  # recorded, nobody woken
    recorded = operations.start(definition_id="order-signal", payload={"order": "S-2"})
    assert _status(recorded.run_id) == "PENDING"

    tasks.run_instance.apply_async(args=[recorded.run_id], queue=QUEUE, countdown=1)

    eventually(
        lambda: _status(recorded.run_id) == "WAITING", timeout=30, what="the run to wait", details=solo_worker.logs
    )
    assert RECEIVED.search(solo_worker.logs()), solo_worker.logs()


def test_a_failing_wake_up_is_logged_and_the_worker_goes_on(
    solo_worker: CeleryProcesses, wake_ups_to_the_solo_worker: list[str], deploy: Any
) -> None:
    deploy(ORDER)
    # no run id (send_task checks no signature): the task function raises
    tasks.run_instance.app.send_task("workflows.run", args=[], queue=QUEUE)

    recorded = operations.start(definition_id="order-signal", payload={"order": "S-3"})

    eventually(
        lambda: _status(recorded.run_id) == "WAITING",
        timeout=30,
        what="the next wake-up to run",
        details=solo_worker.logs,
    )
    logs = solo_worker.logs()
    assert "task workflows.run failed (TypeError)" in logs, logs
    assert solo_worker.worker_running
