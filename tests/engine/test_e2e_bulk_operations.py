"""Bulk operations with real Celery workers: the creation's message applies the operation; a
lost message and a worker killed in the middle of a batch are both recovered by the beat's
sweep, and no run gets the action twice."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.support.ops import ORDER
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import bulk_ops
from workflows.models import BulkOperation, BulkOperationItem, HistoryEntry, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUEUE = f"switchyard-bulk-crash-{os.getpid()}"


def _parked(deploy: Callable[..., Any], n: int, details: Callable[[], str]) -> list[str]:
    deploy(ORDER)
    runs = [operations.start(definition_id="order-signal", payload={"order": f"E-{i}"}).run_id for i in range(n)]
    eventually(
        lambda: Run.objects.filter(pk__in=runs, status="WAITING").count() == n,
        timeout=60,
        what="the runs to park at their payment wait",
        details=details,
    )
    return runs


def _done(operation_id: int) -> bool:
    return BulkOperation.objects.get(pk=operation_id).status == "DONE"


def _cancelled_once_each(runs: list[str]) -> bool:
    """Each run cancelled, with exactly one WORKFLOW_CANCELLED entry (none twice, none missed)."""
    counts = [HistoryEntry.objects.filter(run_id=r, type="WORKFLOW_CANCELLED").count() for r in runs]
    statuses = set(Run.objects.filter(pk__in=runs).values_list("status", flat=True))
    return counts == [1] * len(runs) and statuses == {"CANCELLED"}


def test_the_worker_applies_a_bulk_cancel_and_the_sweep_recovers_a_lost_message(
    celery_worker_process: CeleryProcesses, deploy: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _parked(deploy, 6, celery_worker_process.logs)
    first = operations.bulk_operation_create(action="cancel", run_ids=runs[:3], reason="e2e")
    eventually(
        lambda: _done(first), timeout=60, what="the worker to apply the operation", details=celery_worker_process.logs
    )
    assert _cancelled_once_each(runs[:3])

    monkeypatch.setattr(bulk_ops, "_notifier", None)  # this operation's message is lost
    second = operations.bulk_operation_create(action="cancel", run_ids=runs[3:], reason="e2e")
    # as if it had waited BULK.STALLED_SECONDS: the beat's next sweep sends it again
    BulkOperation.objects.filter(pk=second).update(updated_at=timezone.now() - timedelta(hours=1))
    eventually(
        lambda: _done(second), timeout=60, what="the sweep to resume the operation", details=celery_worker_process.logs
    )
    assert _cancelled_once_each(runs[3:])


@pytest.fixture
def crashing_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[CeleryProcesses]:
    """A solo worker on a queue of its own that dies (``os._exit``) in its first bulk batch,
    after the runs were applied in the batch's transaction and before the items were written;
    this process's bulk messages go to it."""
    from django.db import connection

    env = {
        **os.environ,
        "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"],
        "SWITCHYARD_FAULTS": "bulk_before_settle:exit:#1",
    }
    worker = CeleryProcesses(env, tmp_path_factory.mktemp("bulk-crash"), concurrency=1, pool="solo", queue=QUEUE)
    monkeypatch.setattr(bulk_ops, "_notifier", lambda i: tasks.bulk_apply.apply_async(args=[i], queue=QUEUE))
    try:
        worker.start_worker()
        yield worker
    finally:
        worker.stop()


def test_a_worker_killed_in_a_batch_rolls_it_back_and_the_sweep_applies_each_run_once(
    celery_worker_process: CeleryProcesses, crashing_worker: CeleryProcesses, deploy: Callable[..., Any]
) -> None:
    runs = _parked(deploy, 4, celery_worker_process.logs)
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs, reason="e2e crash")
    eventually(
        lambda: not crashing_worker.worker_running,
        timeout=60,
        what="the crashing worker to die in its batch",
        details=crashing_worker.logs,
    )
    # its batch never committed: no item has an outcome, no run was cancelled
    assert set(BulkOperationItem.objects.filter(operation_id=operation_id).values_list("status", flat=True)) == {
        "PENDING"
    }
    assert set(Run.objects.filter(pk__in=runs).values_list("status", flat=True)) == {"WAITING"}

    BulkOperation.objects.filter(pk=operation_id).update(updated_at=timezone.now() - timedelta(hours=1))
    eventually(
        lambda: _done(operation_id),
        timeout=60,
        what="the sweep to resume the operation",
        details=celery_worker_process.logs,
    )
    assert set(BulkOperationItem.objects.filter(operation_id=operation_id).values_list("status", flat=True)) == {
        "APPLIED"
    }
    assert _cancelled_once_each(runs)
