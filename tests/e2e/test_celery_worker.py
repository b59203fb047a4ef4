"""The real-worker fixtures: the worker consumes the suite's broker and writes to the test
database, and comes back after a SIGKILL."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from demo.models import PurchaseOrder
from tests.support.celery_tasks import create_purchase_order
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_worker_runs_a_task_against_the_test_database(celery_worker_process: CeleryProcesses) -> None:
    create_purchase_order.delay("PO-E2E-1")

    eventually(
        lambda: PurchaseOrder.objects.filter(number="PO-E2E-1").exists(),
        timeout=30,
        what="the worker to create PO-E2E-1",
        details=celery_worker_process.logs,
    )
    assert PurchaseOrder.objects.filter(number="PO-E2E-1").count() == 1


def test_message_sent_while_the_worker_is_dead_runs_after_restart(
    celery_worker_process: CeleryProcesses, crash_celery_worker: Callable[..., None]
) -> None:
    crash_celery_worker(restart=False)
    create_purchase_order.delay("PO-E2E-2")
    time.sleep(1)
    assert not PurchaseOrder.objects.filter(number="PO-E2E-2").exists()

    celery_worker_process.start_worker()

    eventually(
        lambda: PurchaseOrder.objects.filter(number="PO-E2E-2").exists(),
        timeout=30,
        what="the restarted worker to create PO-E2E-2",
        details=celery_worker_process.logs,
    )
