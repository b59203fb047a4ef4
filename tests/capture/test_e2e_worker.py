"""Record triggers through a real Celery worker, beat and broker: after-commit dispatch,
duplicate deliveries, a worker killed while it holds a claim, rollbacks and deletions."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction

from capture import tasks
from capture.models import Capture
from demo.models import PurchaseOrder
from tests.support.capture_callbacks import gate
from tests.support.waiting import eventually
from workflows import queries
from workflows.models import Run, Task

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def order(number: str, total: str = "1500.00", **extra: Any) -> PurchaseOrder:
    return PurchaseOrder.objects.create(number=number, requester="requester", total=Decimal(total), **extra)


def capture_of(po: PurchaseOrder | int, event: str = "created") -> Capture:
    pk = po if isinstance(po, int) else po.pk
    return Capture.objects.get(model="demo.PurchaseOrder", object_pk=str(pk), event=event)


def dispatched(capture: Capture, worker: Any) -> Capture:
    def probe() -> Capture | None:
        capture.refresh_from_db()
        return capture if capture.status == "DISPATCHED" else None

    return eventually(probe, timeout=60, what=f"capture {capture.pk} to be dispatched", details=worker.logs)


def test_saving_a_matching_order_starts_one_run_however_often_the_dispatch_is_delivered(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy()
    po = order("E2E-1")
    capture = capture_of(po)
    extra = [tasks.dispatch.delay(capture.pk).id for _ in range(2)]  # the broker delivers it again, twice
    dispatched(capture, celery_worker_process)
    eventually(
        lambda: all(f"capture.dispatch[{task_id}] succeeded" in celery_worker_process.logs() for task_id in extra),
        timeout=60,
        what="the repeated deliveries to be consumed",
        details=celery_worker_process.logs,
    )
    runs = Run.objects.filter(definition_id="purchase-order-review", business_key="E2E-1")
    assert runs.count() == 1
    assert capture.runs_started == [str(runs.get().id)] and capture.attempts == 1
    eventually(
        lambda: Task.objects.filter(run=runs.get()).exists(),
        timeout=60,
        what="the review to open",
        details=celery_worker_process.logs,
    )


def test_a_worker_killed_after_claiming_is_recovered_and_starts_one_run(
    celery_worker_process: Any, crash_celery_worker: Any, deploy: Any
) -> None:
    deploy()
    pk = 910001
    held = gate("claimed", pk)
    held.touch()
    try:
        order("E2E-2", id=pk)
        eventually(
            lambda: held.with_suffix(".entered").exists(),
            timeout=60,
            what="a worker to claim the capture",
            details=celery_worker_process.logs,
        )
        capture = Capture.objects.get(object_pk=str(pk))
        assert capture.status == "DISPATCHING"
        crash_celery_worker()  # SIGKILL while it holds the claim; a new worker starts
    finally:
        held.unlink(missing_ok=True)
    # the 3-second lease lapses, the beat sweep returns the capture to PENDING and sends it again
    dispatched(capture, celery_worker_process)
    assert capture.attempts == 2
    assert Run.objects.filter(definition_id="purchase-order-review", business_key="E2E-2").count() == 1


def test_a_rolled_back_save_starts_nothing(celery_worker_process: Any, deploy: Any) -> None:
    deploy()
    with pytest.raises(RuntimeError), transaction.atomic():
        order("E2E-ROLLED-BACK")
        raise RuntimeError("the change is abandoned")
    later = order("E2E-AFTER")  # committed after the rollback: once it is dispatched, so would the other be
    dispatched(capture_of(later), celery_worker_process)
    assert not Capture.objects.exclude(pk=capture_of(later).pk).exists()
    assert list(Run.objects.values_list("business_key", flat=True)) == ["E2E-AFTER"]


def test_deleting_the_order_withdraws_its_open_approval(
    celery_worker_process: Any, deploy: Any, demo_users: Any
) -> None:
    deploy()
    po = order("E2E-DEL", total="5000.00")
    alice = demo_users["alice"]
    task = eventually(
        lambda: queries.tasks_for(alice).filter(run__business_key="E2E-DEL").first(),
        timeout=60,
        what="the review to reach alice's inbox",
        details=celery_worker_process.logs,
    )
    pk = po.pk
    po.delete()
    dispatched(capture_of(pk, "deleted"), celery_worker_process)
    task.refresh_from_db()
    assert task.status in ("WITHDRAWN", "CANCELLED")
    assert not queries.tasks_for(alice).exists()
    run = Run.objects.get(pk=task.run_id)
    assert run.status == "CANCELLED" and run.cancel_reason == "record deleted"
