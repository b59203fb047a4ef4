"""Redaction: values at a redactor's pointers never reach any logged form of a run's history."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.engine import documents
from workflows import jsonvalues, operations
from workflows.engine import db
from workflows.engine.history import replay
from workflows.engine.redaction import (
    REDACTED,
    parse_pointer,
    redact,
    redact_text,
    register_redactor,
    unregister_redactor,
)
from workflows.models import Command, HistoryEntry, Run

SECRET = "SECRET-4711"


@pytest.fixture(autouse=True)
def _services() -> Iterator[None]:
    from workflows.definitions import catalogs

    catalogs.callbacks.register("test.reserve", category="service")(lambda payload, headers: None)
    yield
    catalogs.callbacks.unregister("test.reserve", "service")
    unregister_redactor("order-signal")


def history_text(run_id: Any) -> str:
    rows = HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values("outcome", "patch", "payload")
    return jsonvalues.dumps(list(rows))  # decimals come back as Decimal


def make_available(run_id: Any) -> None:
    """Skip a transient backoff (the database clock decides what is due)."""
    db.execute("UPDATE workflow_commands SET available_at = now() WHERE run_id = %s AND status = 'PENDING'", [run_id])


# --- the pieces --------------------------------------------------------------------------


def test_pointers_follow_rfc_6901() -> None:
    assert parse_pointer("") == ()
    assert parse_pointer("/a~1b/c~0d/0") == ("a/b", "c~d", "0")
    for bad in ("a", "/x~2", "/x~", 7, None):
        with pytest.raises(ValueError):
            parse_pointer(bad)


def test_redact_replaces_only_resolving_pointers_and_never_mutates() -> None:
    doc = {"card": {"number": "4111", "holder": "Ann"}, "items": [1, 2]}
    out = redact(doc, [("card", "number"), ("items", "1"), ("missing",), ("items", "9")])
    assert out == {"card": {"number": REDACTED, "holder": "Ann"}, "items": [1, REDACTED]}
    assert doc["card"]["number"] == "4111"
    assert redact(doc, [("nothing",)]) is doc


def test_reason_text_is_redacted_in_one_pass() -> None:
    assert redact_text("refused for x and xy", {"x", "xy"}) == f"refused for {REDACTED} and {REDACTED}"
    assert redact_text("ab", {"ab", "e", "d"}) == REDACTED  # never inside a replacement
    assert redact_text("nothing here", {"zzz"}) == "nothing here"


# --- through the engine --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_redacted_values_never_reach_the_history(deploy: Any, drain: Any) -> None:
    register_redactor("order-signal", lambda version: ["/order"])
    deploy(documents.ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": SECRET})
    drain()
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "WAITING" and run.state["order"] == SECRET  # the run itself keeps it

    received = HistoryEntry.objects.get(run_id=run.id, type="COMMAND_RECEIVED")
    assert received.payload["payload"] == {"order": REDACTED}
    baseline = HistoryEntry.objects.get(run_id=run.id, type="STATE_BASELINE")
    assert baseline.payload["state"] == {"order": REDACTED, "paid": 0.0}
    assert Command.objects.get(run_id=run.id, kind="START").payload == {"order": SECRET}  # never redacted

    operations.cancel(run_id=run.id, reason=f"customer {SECRET} asked", actor=None)
    cancelled = HistoryEntry.objects.get(run_id=run.id, type="CANCELLED")
    assert cancelled.payload["reason"] == f"customer {REDACTED} asked"
    assert SECRET not in history_text(run.id)


@pytest.mark.django_db(transaction=True)
def test_patches_are_diffed_from_redacted_states(deploy: Any, drain: Any) -> None:
    # the pointers apply to the state and to the command payloads alike
    register_redactor("order-signal", lambda version: ["/paid", "/amount"])
    deploy(documents.ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": "A-1"})
    drain()
    operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 4711.5})
    drain()
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "COMPLETED" and run.state["paid"] == 4711.5
    assert "4711" not in history_text(run.id)
    entries = list(
        HistoryEntry.objects.filter(run_id=run.id, type__in=["DECISION", "STATE_BASELINE"])
        .order_by("seq")
        .values("type", "patch", "payload", "branch_id")
    )
    # replay reproduces the stored state except at the redacted pointer
    assert replay(entries) == {**run.state, "paid": REDACTED}


@pytest.mark.django_db(transaction=True)
def test_the_redactor_is_asked_once_per_version_in_a_segment(deploy: Any, drain: Any) -> None:
    asked: list[int] = []

    def pointers(version: int) -> list[str]:
        asked.append(version)
        return ["/order"]

    register_redactor("order-signal", pointers)
    deploy(documents.ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": SECRET})
    drain()
    # one segment (START) logged a receipt, a baseline, decisions and a wait: one question
    assert asked == [1]
    assert HistoryEntry.objects.filter(run_id=recorded.run_id).count() > 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("redactor", [lambda version: 1 / 0, lambda version: ["no-slash"], lambda version: "/order"])
def test_a_failing_redactor_fails_the_segment_transiently(deploy: Any, drain: Any, redactor: Any) -> None:
    register_redactor("order-signal", redactor)
    deploy(documents.ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": SECRET})
    drain()
    start = Command.objects.get(run_id=recorded.run_id, kind="START")
    assert start.status == "PENDING" and start.transient_count == 1 and start.attempts == 0
    assert start.last_error == "TRANSIENT: REDACTION_FAILED"
    assert not HistoryEntry.objects.filter(run_id=recorded.run_id).exists()  # nothing written unredacted

    register_redactor("order-signal", lambda version: ["/order"])
    make_available(recorded.run_id)
    drain()
    assert Run.objects.get(pk=recorded.run_id).status == "WAITING"
    assert SECRET not in history_text(recorded.run_id)
