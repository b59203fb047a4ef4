"""Reconcile (administrators only, with a reason) and the teardown of runs about a deleted record."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection

from capture import dispatch
from capture.models import Capture
from capture.reconcile import CaptureNotFound, NotAdministrator, ReconcileRefused, reconcile
from demo.models import PurchaseOrder
from workflows import queries
from workflows.engine import executor
from workflows.exceptions import InvalidPayload
from workflows.models import Run, Task

pytestmark = pytest.mark.django_db


def failed_capture(status: str = "FAILED") -> Capture:
    po = PurchaseOrder.objects.create(number="PO-R", requester="requester", total=Decimal("1500"))
    capture = Capture.objects.get(object_pk=str(po.pk))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE capture_captures SET status = %s, attempts = 3, last_error = 'X' WHERE id = %s",
            [status, capture.pk],
        )
    return capture


@pytest.mark.parametrize("status", ["FAILED", "OUTCOME_UNKNOWN"])
def test_replay_queues_the_capture_again_and_keeps_who_when_and_why(deploy, no_messages, demo_users, status):
    deploy()
    capture = failed_capture(status)
    done = reconcile(
        capture_id=capture.pk, replay=True, reason="  ERP shows no order; replaying  ", by=demo_users["admin"]
    )
    assert (done.status, done.replayed, done.replays, done.attempts) == ("PENDING", True, 1, 0)
    assert (done.reconciled_by, done.reconcile_reason) == ("admin", "ERP shows no order; replaying")
    assert done.reconciled_at is not None
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    assert Run.objects.count() == 1


def test_resolve_closes_the_capture_without_dispatching_it(deploy, no_messages, demo_users):
    deploy()
    capture = failed_capture("OUTCOME_UNKNOWN")
    done = reconcile(capture_id=capture.pk, replay=False, reason="the effect happened", by=demo_users["admin"])
    assert (done.status, done.replayed) == ("RESOLVED", False)
    assert dispatch.dispatch(capture.pk) == "SKIPPED"
    assert not Run.objects.exists()


def test_only_administrators_reconcile(deploy, no_messages, demo_users):
    deploy()
    capture = failed_capture()
    alice = demo_users["alice"]
    with pytest.raises(NotAdministrator) as refused:
        reconcile(capture_id=capture.pk, replay=True, reason="please", by=alice)
    assert refused.value.status == 403
    alice.user_permissions.add(Permission.objects.get(codename="reconcile_capture"))
    alice = type(alice).objects.get(pk=alice.pk)  # permissions are cached per instance
    assert reconcile(capture_id=capture.pk, replay=False, reason="checked", by=alice).status == "RESOLVED"


@pytest.mark.parametrize("reason", ["", "   ", "\x00\x07"])
def test_a_reason_is_required(deploy, no_messages, demo_users, reason):
    deploy()
    capture = failed_capture()
    with pytest.raises(InvalidPayload) as refused:
        reconcile(capture_id=capture.pk, replay=True, reason=reason, by=demo_users["admin"])
    assert refused.value.violations[0].pointer == "/reason"
    assert Capture.objects.get(pk=capture.pk).status == "FAILED"


@pytest.mark.parametrize("status", ["PENDING", "DISPATCHING", "DISPATCHED", "RESOLVED"])
def test_pending_active_completed_and_resolved_captures_are_refused(deploy, no_messages, demo_users, status):
    deploy()
    capture = failed_capture(status)
    with pytest.raises(ReconcileRefused) as refused:
        reconcile(capture_id=capture.pk, replay=True, reason="why not", by=demo_users["admin"])
    assert refused.value.code == "INVALID_TRANSITION" and status in refused.value.message
    assert Capture.objects.get(pk=capture.pk).status == status


def test_an_unknown_capture_is_not_found(demo_users):
    with pytest.raises(CaptureNotFound):
        reconcile(capture_id=999999, replay=True, reason="x", by=demo_users["admin"])
    with pytest.raises(CaptureNotFound):
        reconcile(capture_id="not-a-number", replay=True, reason="x", by=demo_users["admin"])


def run_review(demo_users: dict[str, Any]) -> tuple[PurchaseOrder, Run]:
    po = PurchaseOrder.objects.create(number="PO-D", requester="requester", total=Decimal("5000"))
    dispatch.dispatch(Capture.objects.get(object_pk=str(po.pk), event="created").pk)
    executor.drain(budget_seconds=10)
    run = Run.objects.get()
    assert run.status == "WAITING" and run.subject == {"type": "demo.purchaseorder", "id": str(po.pk), "version": ""}
    assert queries.tasks_for(demo_users["alice"]).count() == 1
    return po, run


@pytest.mark.django_db(transaction=True)
def test_deleting_the_record_withdraws_its_approvals_and_cancels_its_runs(deploy, no_messages, demo_users):
    deploy()
    po, run = run_review(demo_users)
    po.delete()
    capture = Capture.objects.get(event="deleted")
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    run.refresh_from_db()
    assert run.status == "CANCELLED" and run.cancel_reason == "record deleted"
    assert Task.objects.get(run=run).status in ("WITHDRAWN", "CANCELLED")
    assert not queries.tasks_for(demo_users["alice"]).exists()
    capture.refresh_from_db()
    assert capture.runs_cancelled == [str(run.id)]
    assert run.history.exists()  # the run and its history outlive the record


@pytest.mark.django_db(transaction=True)
def test_a_run_that_ended_before_the_deletion_is_left_as_it_is(deploy, no_messages, demo_users):
    from workflows import operations

    deploy()
    po, run = run_review(demo_users)
    po.delete()
    operations.cancel(run_id=run.id, reason="withdrawn by the requester")
    assert dispatch.dispatch(Capture.objects.get(event="deleted").pk) == "DISPATCHED"
    run.refresh_from_db()
    assert run.cancel_reason == "withdrawn by the requester"
