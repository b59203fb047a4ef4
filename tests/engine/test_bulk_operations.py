"""Bulk operations in the engine (``workflows.engine.bulk_ops`` through ``workflows.operations``):
bounded batches whose items are the truth.

A repeated or concurrent batch never applies the action twice to a run; a batch that dies
half-way (its transaction never commits, as under a killed worker) leaves every item PENDING
and the next batch applies each run once; a refusal on one run is that run's outcome, not the
operation's; the sweep finds an operation whose batches stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from tests.support.ops import ORDER
from workflows import conf, operations, tasks
from workflows.engine import bulk_ops
from workflows.models import BulkOperation, BulkOperationItem, Command, HistoryEntry, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(deploy: Callable[..., Any], drain: Callable[..., int]) -> Callable[[int], list[str]]:
    """``n`` order runs parked at their payment wait."""
    deploy(ORDER)

    def _start(n: int) -> list[str]:
        ids = [operations.start(definition_id="order-signal", payload={"order": f"B-{i}"}).run_id for i in range(n)]
        drain()
        assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"WAITING"}
        return ids

    return _start


@pytest.fixture
def small_batches(settings: Any) -> Any:
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "BULK": {"BATCH": 2}}
    conf.reload()
    yield
    conf.get.cache_clear()


def _apply_all(operation_id: int) -> int:
    batches = 0
    while not operations.bulk_operation_apply_batch(operation_id=operation_id).done:
        batches += 1
        assert batches < 100, "the operation never finished"
    return batches


def _cancellations(run_id: str) -> int:
    return HistoryEntry.objects.filter(run_id=run_id, type="WORKFLOW_CANCELLED").count()


def _outcomes(operation_id: int) -> dict[str, str]:
    return {
        str(r): s
        for r, s in BulkOperationItem.objects.filter(operation_id=operation_id).values_list("run_id", "status")
    }


def test_a_bulk_cancel_applies_in_bounded_batches_each_run_once(
    waiting: Callable[[int], list[str]], small_batches: None
) -> None:
    runs = waiting(5)
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs, reason="supplier gone")
    assert BulkOperation.objects.get(pk=operation_id).status == "PENDING"

    first = operations.bulk_operation_apply_batch(operation_id=operation_id)
    assert (first.claimed, first.done) == (2, False)
    assert Run.objects.filter(pk__in=runs, status="CANCELLED").count() == 2
    assert BulkOperation.objects.get(pk=operation_id).status == "RUNNING"

    _apply_all(operation_id)
    record = BulkOperation.objects.get(pk=operation_id)
    assert record.status == "DONE" and record.finished_at is not None
    assert set(_outcomes(operation_id).values()) == {"APPLIED"}
    assert [_cancellations(r) for r in runs] == [1] * 5
    # applied again (a repeated message): nothing more happens to any run
    again = operations.bulk_operation_apply_batch(operation_id=operation_id)
    assert (again.claimed, again.done) == (0, True)
    assert [_cancellations(r) for r in runs] == [1] * 5


def test_a_refusal_on_one_run_is_that_runs_outcome(waiting: Callable[[int], list[str]]) -> None:
    runs = waiting(3)
    operations.cancel(run_id=runs[1], reason="already gone")
    operation_id = operations.bulk_operation_create(
        action="signal", run_ids=runs, signal_name="paid", signal_payload={"amount": 5}
    )
    _apply_all(operation_id)

    items = {str(i.run_id): i for i in BulkOperationItem.objects.filter(operation_id=operation_id)}
    refused = items[runs[1]]
    assert (refused.status, refused.code, refused.command_id) == ("REFUSED", "SIGNAL_REJECTED", None)
    for run_id in (runs[0], runs[2]):
        item = items[run_id]
        assert item.status == "APPLIED" and item.code == ""
        assert Command.objects.get(pk=item.command_id).kind == "SIGNAL"
    assert BulkOperation.objects.get(pk=operation_id).status == "DONE"
    # the refused run got nothing: its only signal-like entry is the earlier cancel
    assert not Command.objects.filter(run_id=runs[1], kind="SIGNAL").exists()


def test_a_batch_that_dies_half_way_leaves_every_item_pending_and_the_next_applies_each_once(
    waiting: Callable[[int], list[str]],
) -> None:
    """A killed worker never commits: everything its batch did, the cancels included, rolls
    back with it. The crash is the transaction ending without a commit after two runs."""
    runs = waiting(4)
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs)
    applied: list[Any] = []

    class Killed(BaseException):
        pass

    def dies_after_two(operation: dict[str, Any], run_id: Any) -> int | None:
        if len(applied) == 2:
            raise Killed
        operations.cancel(run_id=run_id, actor=bulk_ops.actor_of(operation))
        applied.append(run_id)
        return None

    with pytest.raises(Killed), transaction.atomic():
        bulk_ops.apply_batch(operation_id=operation_id, apply=dies_after_two, size=10, max_attempts=5)
    assert len(applied) == 2
    assert set(_outcomes(operation_id).values()) == {"PENDING"}
    assert set(Run.objects.filter(pk__in=runs).values_list("status", flat=True)) == {"WAITING"}

    _apply_all(operation_id)
    assert set(_outcomes(operation_id).values()) == {"APPLIED"}
    assert [_cancellations(r) for r in runs] == [1] * 4


def test_two_batches_at_once_share_the_items_and_apply_each_run_once(
    waiting: Callable[[int], list[str]], small_batches: None
) -> None:
    """A duplicated message: two workers apply the same operation at the same time."""
    runs = waiting(6)
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs)
    barrier = threading.Barrier(2, timeout=30)
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            _apply_all(operation_id)
        except BaseException as error:  # reported below; a thread's exception is otherwise lost
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a batch hung"
    assert failures == []
    assert set(_outcomes(operation_id).values()) == {"APPLIED"}
    assert [_cancellations(r) for r in runs] == [1] * 6
    assert BulkOperation.objects.get(pk=operation_id).status == "DONE"


def test_history_names_the_operations_creator(waiting: Callable[[int], list[str]], django_user_model: Any) -> None:
    runs = waiting(1)
    operator = django_user_model.objects.create_superuser("operator", password="operator")
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs, reason="bulk", actor=operator)
    _apply_all(operation_id)
    entry = HistoryEntry.objects.get(run_id=runs[0], type="WORKFLOW_CANCELLED")
    assert (entry.actor_kind, entry.actor_id) == ("USER", "operator")


def test_a_creator_who_lost_the_capability_gets_not_permitted_per_run(
    waiting: Callable[[int], list[str]], django_user_model: Any
) -> None:
    runs = waiting(2)
    operator = django_user_model.objects.create_superuser("operator", password="operator")
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs, actor=operator)
    django_user_model.objects.filter(pk=operator.pk).update(is_active=False)
    _apply_all(operation_id)
    items = BulkOperationItem.objects.filter(operation_id=operation_id)
    assert {(i.status, i.code) for i in items} == {("REFUSED", "NOT_PERMITTED")}
    assert set(Run.objects.filter(pk__in=runs).values_list("status", flat=True)) == {"WAITING"}


def test_a_transient_failure_is_tried_again_then_failed(waiting: Callable[[int], list[str]]) -> None:
    from workflows.exceptions import LockTimeout

    runs = waiting(1)
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs)

    def busy(operation: dict[str, Any], run_id: Any) -> int | None:
        raise LockTimeout("the run was busy")

    first = operations._whole_tx(
        "t", bulk_ops.apply_batch, operation_id=operation_id, apply=busy, size=5, max_attempts=2
    )
    item = BulkOperationItem.objects.get(operation_id=operation_id)
    assert (first.done, item.status, item.attempts, item.code) == (False, "PENDING", 1, "LOCK_TIMEOUT")
    second = operations._whole_tx(
        "t", bulk_ops.apply_batch, operation_id=operation_id, apply=busy, size=5, max_attempts=2
    )
    item.refresh_from_db()
    assert (second.done, item.status, item.attempts) == (True, "FAILED", 2)


def test_the_sweep_resumes_an_operation_without_progress(
    waiting: Callable[[int], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = waiting(2)
    sent: list[int] = []
    monkeypatch.setattr(bulk_ops, "_notifier", None)  # the creation's message is lost
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs)
    assert operations.bulk_operations_stalled() == []  # fresh: its message may still come
    BulkOperation.objects.filter(pk=operation_id).update(
        updated_at=Run.objects.get(pk=runs[0]).created_at.replace(year=2000)
    )
    monkeypatch.setattr(tasks.bulk_apply, "delay", lambda i: sent.append(i))
    monkeypatch.setattr(tasks.deliver, "delay", lambda i: None)
    tasks.sweep()
    tasks.sweep()  # the next sweeps find its message queued (leased): no second one
    assert sent == [operation_id]
    assert operations.bulk_operations_stalled() == []
    tasks.bulk_apply.run(operation_id)  # what the message runs
    assert BulkOperation.objects.get(pk=operation_id).status == "DONE"
    assert operations.bulk_operations_stalled() == []


def test_an_empty_selection_is_done_at_once(waiting: Callable[[int], list[str]]) -> None:
    operation_id = operations.bulk_operation_create(
        action="retry", run_ids=Run.objects.none().values_list("id", flat=True), filter={"status": ["FAILED"]}
    )
    record = BulkOperation.objects.get(pk=operation_id)
    assert (record.status, record.total, record.selection) == ("DONE", 0, "filter")
