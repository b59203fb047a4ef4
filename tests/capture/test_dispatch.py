"""Dispatch in-process: claim, evaluate the triggers, record the starts with the status, settle."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from capture import actor, dispatch, effects, recording
from capture.models import Capture, EffectMarker
from demo.models import PurchaseOrder
from workflows.exceptions import LockTimeout
from workflows.models import Run

EVERY_EVENT = """
definitionId: po-audit
definitionVersion: 1
contract: {name: po-audit.v1, signals: {}}
stateSchema: {type: object}
trigger:
  model: demo.PurchaseOrder
  on: [created, updated, deleted]
  when: "record.number.startsWith('AUD')"
  payload: '{"number": record.number, "event": event}'
initialStep: done
steps:
  - {id: done, type: complete}
"""


def order(number: str = "PO-1", total: str = "1500.00") -> PurchaseOrder:
    return PurchaseOrder.objects.create(number=number, requester="requester", total=Decimal(total))


def sql(statement: str, params: list[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.mark.django_db
def test_a_matching_capture_records_one_start_with_its_status(deploy, no_messages, demo_users):
    deploy()
    with actor.acting_as(demo_users["requester"]):
        po = order()
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    capture.refresh_from_db()
    run = Run.objects.get()
    assert capture.status == "DISPATCHED" and capture.runs_started == [str(run.id)] and capture.attempts == 1
    assert capture.claim_token is None and capture.dispatched_at is not None
    assert (run.definition_id, run.version, run.status, run.business_key) == (
        "purchase-order-review",
        1,
        "PENDING",
        "PO-1",
    )
    assert (run.actor_kind, run.actor_id) == ("USER", "requester")
    start = run.commands.get(kind="START")
    assert start.payload == {"id": po.pk, "number": "PO-1", "total": 1500, "requester": "requester", "description": ""}


@pytest.mark.django_db
def test_a_second_delivery_finds_nothing_to_claim(deploy, no_messages):
    deploy()
    order()
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    assert dispatch.dispatch(capture.pk) == "SKIPPED"
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_dispatching_a_capture_again_records_no_second_run(deploy, no_messages):
    """Even if a capture came back to PENDING, its idempotency keys answer the first starts."""
    deploy()
    order()
    capture = Capture.objects.get()
    dispatch.dispatch(capture.pk)
    sql("UPDATE capture_captures SET status = 'PENDING' WHERE id = %s", [capture.pk])
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_capture_the_when_rejects_is_dispatched_without_a_run(deploy, no_messages):
    deploy()
    order(total="999.99")
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    assert not Run.objects.exists()
    capture.refresh_from_db()
    assert capture.runs_started == []


@pytest.mark.django_db
def test_eligibility_is_resolved_at_dispatch_time(deploy, no_messages):
    from workflows import definitions

    deploy()
    order()
    definitions.deactivate_default(definition_id="purchase-order-review")
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_every_matching_trigger_starts_its_own_run(deploy, no_messages):
    deploy()
    deploy(EVERY_EVENT)
    order(number="AUD-7")
    dispatch.dispatch(Capture.objects.get().pk)
    assert sorted(Run.objects.values_list("definition_id", flat=True)) == ["po-audit", "purchase-order-review"]
    assert Run.objects.get(definition_id="po-audit").commands.get(kind="START").payload == {
        "number": "AUD-7",
        "event": "created",
    }


@pytest.mark.django_db
def test_a_trigger_that_fails_fails_the_whole_capture_with_a_value_free_reason(deploy, no_messages):
    deploy()
    deploy(EVERY_EVENT.replace("record.number.startsWith('AUD')", "record.missing == 1"))
    order(number="SECRET-NUMBER-42")
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "FAILED"
    capture.refresh_from_db()
    assert capture.status == "FAILED"
    assert capture.last_error.startswith("trigger of po-audit v1: EXPRESSION_FAILED")
    assert "SECRET" not in capture.last_error
    assert not Run.objects.exists()  # the review's start rolled back with it


@pytest.mark.django_db
def test_a_refused_start_fails_the_capture_with_its_code(deploy, no_messages):
    deploy()
    PurchaseOrder.objects.create(number="PO-X", requester="r" * 150, total=Decimal("-5000"))
    sql("UPDATE capture_captures SET snapshot = jsonb_set(snapshot, '{total}', '5000') WHERE TRUE", [])
    sql("UPDATE capture_captures SET snapshot = jsonb_set(snapshot, '{number}', '\"\"') WHERE TRUE", [])
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "FAILED"
    capture.refresh_from_db()
    assert capture.last_error.startswith("trigger of purchase-order-review v1: INVALID_PAYLOAD")


@pytest.mark.django_db
def test_a_deleted_or_inactive_user_gives_no_attribution(deploy, no_messages, demo_users):
    deploy()
    requester = demo_users["requester"]
    with actor.acting_as(requester):
        order(number="PO-A")
        order(number="PO-B")
    first, second = Capture.objects.order_by("id")
    requester.is_active = False
    requester.save()
    dispatch.dispatch(first.pk)
    requester.delete()
    dispatch.dispatch(second.pk)
    assert set(Run.objects.values_list("actor_kind", flat=True)) == {"NONE"}


@pytest.mark.django_db
def test_a_retryable_failure_returns_the_capture_to_pending_until_attempts_run_out(deploy, no_messages, monkeypatch):
    from workflows import operations

    deploy()
    order()
    capture = Capture.objects.get()

    def busy(**kwargs: Any) -> None:
        raise LockTimeout("start: the run is busy (lock timeout); retry the transaction")

    monkeypatch.setattr(operations, "start", busy)
    assert dispatch.dispatch(capture.pk) == "PENDING"
    capture.refresh_from_db()
    assert capture.last_error.startswith("trigger of purchase-order-review v1: LOCK_TIMEOUT")
    sql(
        "UPDATE capture_captures SET available_at = now(), attempts = %s WHERE id = %s",
        [dispatch.MAX_ATTEMPTS - 1, capture.pk],
    )
    assert dispatch.dispatch(capture.pk) == "FAILED"


@pytest.mark.django_db(transaction=True)
def test_an_obsolete_dispatch_commits_nothing(deploy, no_messages, monkeypatch):
    """A worker whose lease expired and whose capture another worker took over must not
    commit its starts, even though it got as far as recording them."""
    deploy()
    order()
    capture = Capture.objects.get()
    real_for_event = dispatch.triggers.for_event

    def taken_over_meanwhile(model: str, event: str) -> Any:
        def steal() -> None:
            sql("UPDATE capture_captures SET claim_token = gen_random_uuid() WHERE id = %s", [capture.pk])
            connection.close()

        thief = threading.Thread(target=steal)
        thief.start()
        thief.join(10)
        return real_for_event(model, event)

    monkeypatch.setattr(dispatch.triggers, "for_event", taken_over_meanwhile)
    assert dispatch.dispatch(capture.pk) == "OBSOLETE"
    assert not Run.objects.exists()
    assert Capture.objects.get().status == "DISPATCHING"  # the new holder settles it


@pytest.fixture
def failing_effect():
    calls: list[Any] = []

    @effects.register(
        "demo.PurchaseOrder",
        on=("created",),
        name="tests.failing_effect",
        when=lambda event: event.record["number"].startswith("FX"),
        fields=("number",),
    )
    def call_other_system(event: effects.CapturedEvent) -> None:
        calls.append(event.object_pk)
        raise ConnectionError("the other system hung up")

    yield calls
    effects.unregister("tests.failing_effect")
    effects.close()


@pytest.mark.django_db(transaction=True)
def test_a_failure_after_an_effect_marker_is_outcome_unknown(deploy, no_messages, failing_effect):
    deploy()
    order(number="FX-1")
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "OUTCOME_UNKNOWN"
    capture.refresh_from_db()
    assert capture.status == "OUTCOME_UNKNOWN" and capture.effect_started_at is not None
    assert capture.last_error == "ERROR: the dispatch failed"
    assert failing_effect == [capture.object_pk]
    assert EffectMarker.objects.filter(capture=capture, effect="tests.failing_effect").count() == 1
    assert not Run.objects.exists()
    assert dispatch.dispatch(capture.pk) == "SKIPPED"  # never replayed by itself
    assert failing_effect == [capture.object_pk]


@pytest.mark.django_db(transaction=True)
def test_the_sweep_returns_an_expired_unmarked_claim_and_parks_a_marked_one(deploy, no_messages):
    deploy()
    order(number="PO-1")
    order(number="PO-2")
    unmarked, marked = Capture.objects.order_by("id")
    for capture in (unmarked, marked):
        assert dispatch.claim(capture.pk) is not None
    token = Capture.objects.get(pk=marked.pk).claim_token
    effects.mark_started(capture_id=marked.pk, token=token, effect="tests.something")
    effects.close()
    sql("UPDATE capture_captures SET lease_until = now() - interval '1 second'", [])
    assert sorted(dispatch.recover_expired()) == [(unmarked.pk, "PENDING"), (marked.pk, "OUTCOME_UNKNOWN")]
    unmarked.refresh_from_db()
    marked.refresh_from_db()
    assert unmarked.last_error.startswith("LEASE_EXPIRED") and unmarked.claim_token is None
    assert marked.last_error.startswith("OUTCOME_UNKNOWN") and marked.effect_started_at is not None
    assert dispatch.dispatch(unmarked.pk) == "DISPATCHED"
    assert Capture.objects.get(pk=unmarked.pk).attempts == 2
    assert dispatch.dispatch(marked.pk) == "SKIPPED"


@pytest.mark.django_db
def test_a_live_claim_is_left_alone_by_the_sweep(deploy, no_messages):
    deploy()
    order()
    capture = Capture.objects.get()
    dispatch.claim(capture.pk)
    assert dispatch.recover_expired() == []
    assert Capture.objects.get().status == "DISPATCHING"


@pytest.mark.django_db
def test_the_sweep_sends_pending_captures_whose_message_was_lost(deploy, no_messages):
    deploy()
    order()
    capture = Capture.objects.get()
    assert dispatch.stale_pending() == []  # its message is presumed queued (MESSAGE_LEASE_SECONDS)
    sql("UPDATE capture_captures SET available_at = now() - interval '5 minutes'", [])
    assert dispatch.stale_pending() == [capture.pk]
    assert dispatch.stale_pending() == []  # the message sent again is queued: no second one


@pytest.mark.django_db
def test_retention_deletes_only_old_dispatched_captures(deploy, no_messages):
    deploy()
    for number in ("PO-1", "PO-2", "PO-3", "PO-4"):
        order(number=number)
    old_done, new_done, old_failed, old_resolved = Capture.objects.order_by("id")
    sql(
        "UPDATE capture_captures SET status = 'DISPATCHED', dispatched_at = now() - interval '8 days' WHERE id = %s",
        [old_done.pk],
    )
    sql(
        "UPDATE capture_captures SET status = 'DISPATCHED', dispatched_at = now() - interval '6 days' WHERE id = %s",
        [new_done.pk],
    )
    sql(
        "UPDATE capture_captures SET status = 'FAILED', created_at = now() - interval '30 days' WHERE id = %s",
        [old_failed.pk],
    )
    sql(
        "UPDATE capture_captures SET status = 'RESOLVED', dispatched_at = now() - interval '30 days' WHERE id = %s",
        [old_resolved.pk],
    )
    assert dispatch.purge_dispatched() == 1
    assert sorted(Capture.objects.values_list("id", flat=True)) == sorted([new_done.pk, old_failed.pk, old_resolved.pk])


@pytest.mark.django_db
def test_the_capture_task_names_match_the_beat_schedule(settings):
    from capture import tasks

    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"capture.sweep", "capture.retention"} <= scheduled
    assert (tasks.dispatch.name, tasks.sweep.name, tasks.retention.name) == (
        "capture.dispatch",
        "capture.sweep",
        "capture.retention",
    )


def test_idempotency_keys_are_per_capture_and_definition():
    assert dispatch.idempotency_key(7, "purchase-order-review") == "capture:7:purchase-order-review"
    assert len(dispatch.idempotency_key(7, "x" * 255)) <= 255
    assert recording.json_value(Decimal("12.50")) == 12.5 and recording.json_value(Decimal("12.00")) == 12
