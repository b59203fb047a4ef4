"""Wake-ups through a real Celery worker under the conditions that used to delay them
(issue #45): commands queued behind an ended run, a run whose lock another transaction holds
when its wake-up arrives, a wake-up naming no stored run, and a caller whose segment must tear
down a called run that another transaction holds."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, connections, transaction

from tests.engine import documents
from tests.engine.test_forks_and_calls import CHILD
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import wakeups
from workflows.models import Command, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# the service step's handler is registered in the worker too (test.reserve is in-process only)
ORDER_SIGNAL = documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")

# a caller that calls child-review in one branch and stops at a signal in the other: the
# signal's segment ends the caller and cancels the called run (the join takes any branch)
CALLER = """
definitionId: caller-stop
definitionVersion: 1
contract: {name: caller-stop.v1, signals: {stop: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: split
steps:
  - id: split
    type: fork
    branches: [call, stop]
    join: gather
  - id: call
    type: call
    definitionId: child-review
    next: gather
  - id: stop
    type: wait-signal
    signal: stop
    next: gather
  - id: gather
    type: join
    policy: any
    next: done
  - id: done
    type: complete
"""


def status_of(run_id: Any) -> str:
    return Run.objects.get(pk=run_id).status


def wait_for(run_id: Any, status: str, worker: Any) -> None:
    eventually(lambda: status_of(run_id) == status, timeout=60, what=f"the run to be {status}", details=worker.logs)


@contextmanager
def wake_ups_lost(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Commands recorded inside send no wake-up (as if it was lost or not yet arrived)."""
    with monkeypatch.context() as patch:
        patch.setattr(wakeups, "_notifier", None)
        yield


@contextmanager
def run_locked(run_id: Any) -> Iterator[None]:
    """Another transaction holds the run's execution lock and records nothing (as a replay of
    a duplicate key or a refused call does) until the block ends."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE", [run_id])
        yield
    finally:
        other.close()  # rolls back: the lock is free


def task_finished(worker: Any, task_id: str) -> str | None:
    """How the worker ended this message ("succeeded", "raised" ...), None while it has not."""
    found = re.search(rf"\[{re.escape(task_id)}\] (succeeded|raised|failed)", worker.logs())
    return found.group(1) if found else None


def test_commands_queued_behind_an_ended_run_all_settle_in_one_pass(
    celery_worker_process: Any, deploy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(ORDER_SIGNAL)
    run_id = operations.start(definition_id="order-signal", payload={"order": "Q-1"}).run_id
    wait_for(run_id, "WAITING", celery_worker_process)
    with wake_ups_lost(monkeypatch), transaction.atomic():
        for amount in range(16):  # the first completes the run; 15 are queued behind its end
            operations.signal(run_id=run_id, name="paid", payload={"amount": amount})
    assert Run.objects.get(pk=run_id).open_signals == 16
    tasks.run_instance.delay(str(run_id))
    # one per sweep (2 s each) took about 30 s; one pass takes well under the timeout
    eventually(
        lambda: not Command.objects.filter(run_id=run_id, kind="SIGNAL", status="PENDING").exists(),
        timeout=10,
        what="every queued signal to settle",
        details=celery_worker_process.logs,
    )
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.open_signals, run.state["paid"]) == ("COMPLETED", 0, 0)
    statuses = list(
        Command.objects.filter(run_id=run_id, kind="SIGNAL").order_by("seq").values_list("status", flat=True)
    )
    assert statuses[0] == "COMPLETE" and set(statuses[1:]) == {"REJECTED"} and len(statuses) == 16


def test_a_wake_up_that_finds_the_run_busy_is_sent_again(
    celery_worker_process: Any, deploy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No sweep runs in this test (beat stopped before the run starts; a sweep message already
    # queued runs before the run's own start): a dropped wake-up would leave the signal PENDING
    # for good, so the run completing proves the wake-up was sent again. No clock is read.
    celery_worker_process.stop_beat()
    try:
        deploy(ORDER_SIGNAL)
        run_id = operations.start(definition_id="order-signal", payload={"order": "B-1"}).run_id
        wait_for(run_id, "WAITING", celery_worker_process)
        with wake_ups_lost(monkeypatch):
            signal = operations.signal(run_id=run_id, name="paid", payload={"amount": 1})
        with run_locked(run_id):
            message = tasks.run_instance.delay(str(run_id))  # arrives while the lock is held
            eventually(
                lambda: task_finished(celery_worker_process, message.id) is not None,
                timeout=30,
                what="the worker to take the wake-up",
                details=celery_worker_process.logs,
            )
            assert Command.objects.get(pk=signal.command_id).status == "PENDING"
        wait_for(run_id, "COMPLETED", celery_worker_process)
        assert Command.objects.get(pk=signal.command_id).status == "COMPLETE"
    finally:
        celery_worker_process.start_beat()


def test_a_wake_up_naming_no_stored_run_is_a_quiet_no_op(celery_worker_process: Any) -> None:
    message = tasks.run_instance.delay(str(uuid.uuid4()))
    eventually(
        lambda: task_finished(celery_worker_process, message.id) is not None,
        timeout=30,
        what="the worker to take the wake-up",
        details=celery_worker_process.logs,
    )
    assert task_finished(celery_worker_process, message.id) == "succeeded", celery_worker_process.logs()
    assert "InstanceNotFound" not in celery_worker_process.logs()


def lock_waiters() -> int:
    """Backends of this database waiting on a lock (the test's own excluded)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return int(cur.fetchone()[0])


def test_a_caller_never_waits_on_its_called_runs_lock(celery_worker_process: Any, deploy: Any) -> None:
    deploy(CHILD)
    deploy(CALLER)
    caller = operations.start(definition_id="caller-stop", payload={}).run_id
    eventually(
        lambda: Run.objects.filter(parent_run_id=caller, status="WAITING").exists() and status_of(caller) == "WAITING",
        timeout=60,
        what="the caller to wait on its called run",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=caller).id
    seen: dict[str, Any] = {"waiters": 0, "claimed": False, "released": False}

    def probe() -> bool:
        seen["waiters"] = max(seen["waiters"], lock_waiters())
        status = Command.objects.get(pk=stop.command_id).status
        if status == "CLAIMED":
            seen["claimed"] = True
        elif seen["claimed"] and status == "PENDING":
            seen["released"] = True  # the segment gave its claim back, never having waited
        return bool(seen["waiters"]) or seen["released"]

    with run_locked(child):
        stop = operations.signal(run_id=caller, name="stop")
        eventually(probe, timeout=60, what="the caller's segment to meet the busy called run", interval=0.02)
        assert seen["waiters"] == 0, "an executor connection waited on the called run's lock"
    wait_for(caller, "COMPLETED", celery_worker_process)
    assert status_of(child) == "CANCELLED"
