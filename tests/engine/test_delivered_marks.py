"""Carried delivered marks: in a worker, the intent a wake-up delivered is marked DELIVERED by
the next wake-up's claim statement, or by the flusher thread when no wake-up follows; a claim
that fails hands its marks back. Nothing is ever left DELIVERING for its lease to lapse."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.engine import documents
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import outbox
from workflows.engine.outbox import delivery
from workflows.models import OutboxIntent

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")


@pytest.fixture
def carried(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Carry marks as a worker does, without the flusher thread (so each step is observable)."""
    monkeypatch.setattr(delivery._Marks, "_ensure_flusher", lambda self: None)
    outbox.enable_carried_marks()
    try:
        yield
    finally:
        outbox.flush_marks()
        outbox.enable_carried_marks(False)


def started(order: str) -> Any:
    return operations.start(definition_id="order-signal", payload={"order": order}).run_id


def intent_status(run_id: Any) -> str:
    return OutboxIntent.objects.get(run_id=run_id, kind="SERVICE").status


def test_the_next_wake_up_writes_the_mark_of_the_intent_delivered_before(deploy: Any, carried: None) -> None:
    deploy(DOCUMENT)
    first = started("M-1")
    tasks.run_instance(str(first))
    assert intent_status(first) == "DELIVERING"  # delivered; its mark rides on the next claim
    second = started("M-2")
    tasks.run_instance(str(second))
    assert intent_status(first) == "DELIVERED"
    assert intent_status(second) == "DELIVERING"
    assert outbox.flush_marks() == 1
    assert intent_status(second) == "DELIVERED"
    intent = OutboxIntent.objects.get(run_id=second, kind="SERVICE")
    assert intent.token is None and intent.lease_until is None and intent.delivered_at is not None


def test_a_claim_that_finds_its_run_busy_hands_the_marks_back(deploy: Any, carried: None) -> None:
    deploy(DOCUMENT)
    first = started("M-3")
    tasks.run_instance(str(first))
    second = started("M-4")
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
    ) as other:
        other.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", [second])  # someone holds its lock
        assert tasks.run_instance(str(second)) == 0
        assert intent_status(first) == "DELIVERING"
    assert outbox.flush_marks() == 1
    assert intent_status(first) == "DELIVERED"


def test_with_no_wake_up_after_it_the_flusher_writes_the_mark(deploy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "FLUSHER_IDLE_SECONDS", 0.2)  # its connection goes back soon after
    deploy(DOCUMENT)
    outbox.enable_carried_marks()
    try:
        run_id = started("M-5")
        tasks.run_instance(str(run_id))
        assert intent_status(run_id) == "DELIVERING"  # delivered; no wake-up follows to carry the mark
        eventually(lambda: intent_status(run_id) == "DELIVERED", timeout=10, what="the flusher to write the mark")
        intent = OutboxIntent.objects.get(run_id=run_id, kind="SERVICE")
        assert intent.token is None and intent.delivered_at is not None
    finally:
        outbox.enable_carried_marks(False)


def test_outside_a_worker_the_mark_is_written_at_once(deploy: Any) -> None:
    deploy(DOCUMENT)
    run_id = started("M-6")
    tasks.run_instance(str(run_id))
    assert intent_status(run_id) == "DELIVERED"
