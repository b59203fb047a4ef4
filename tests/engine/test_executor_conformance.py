"""Executor conformance (issue #26), in-process (the code the Celery tasks run): a start whose
initial state or subject fails stays PENDING, and a failed segment's texts carry no class name.
The same start flow through a real worker is in test_e2e_conformance.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.support.ops import dead_letter_next_command
from workflows import conf, operations
from workflows.definitions import catalogs
from workflows.engine import db, executor, faults
from workflows.models import Command, HistoryEntry, Run

SENTINEL = "LEAK-SENTINEL-26e2"

FLAKY_SUBJECT = """
definitionId: flaky-subject
definitionVersion: 1
contract: {name: flaky-subject.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
subjectResolver: test.subject_while_gate
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""

WAITS = """
definitionId: waits
definitionVersion: 1
contract: {name: waits.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


def history_types(run_id: Any) -> list[str]:
    return list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))


def lapse(command_id: int) -> None:
    """The claim's lease runs out (moved back in the database) and recovery takes it back."""
    db.execute("UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE id = %s", [command_id])
    assert executor.recover_expired_leases() == 1


@pytest.mark.django_db(transaction=True)
def test_a_failing_subject_resolver_leaves_the_run_pending_until_the_claim_lapses(
    deploy: Any, drain: Any, tmp_path: Path
) -> None:
    """A subject resolver (or initial-state mapper) that threw failed the run at once; the
    reference rolls the segment back, keeps the run PENDING and lets the claim lapse, so the
    start is claimed again (engine.txt 183)."""
    deploy(FLAKY_SUBJECT)
    gate = tmp_path / "gate"
    gate.touch()
    recorded = operations.start(definition_id="flaky-subject", payload={"gate": str(gate)})
    drain(recorded.run_id)
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.state, run.current_step, run.subject_id) == ("PENDING", None, None, "")
    start = Command.objects.get(pk=recorded.command_id)
    assert (start.status, start.attempts, start.last_error) == ("CLAIMED", 1, "")
    assert history_types(run.id) == []  # nothing of the rolled-back segment
    drain(recorded.run_id)  # the claim still stands: nothing runs it again before it lapses
    assert Command.objects.get(pk=start.pk).attempts == 1

    gate.unlink()  # what the resolver needed is there now
    lapse(start.pk)
    drain(recorded.run_id)
    run.refresh_from_db()
    assert (run.status, run.current_step, run.subject_id) == ("WAITING", "wait-go", "O-1")
    start.refresh_from_db()
    assert (start.status, start.attempts) == ("COMPLETE", 2)
    assert history_types(run.id).count("WORKFLOW_STARTED") == 1


@pytest.mark.django_db(transaction=True)
def test_a_start_whose_initialisation_keeps_failing_fails_its_run_once_its_attempts_are_spent(
    deploy: Any, drain: Any, tmp_path: Path
) -> None:
    deploy(FLAKY_SUBJECT)
    gate = tmp_path / "gate"
    gate.touch()
    recorded = operations.start(definition_id="flaky-subject", payload={"gate": str(gate)})
    for _ in range(conf.get().EXECUTOR.MAX_ATTEMPTS):
        drain(recorded.run_id)
        assert Run.objects.get(pk=recorded.run_id).status == "PENDING"
        lapse(recorded.command_id)
    drain(recorded.run_id)
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.failure_code) == ("FAILED", "MAX_ATTEMPTS")
    assert Command.objects.get(pk=recorded.command_id).status == "DEAD"
    assert "WORKFLOW_FAILED" in history_types(run.id)


# --- texts of a failed segment (engine 139, 450) -------------------------------------------------


def failing_before_settle(condition: str, monkeypatch: pytest.MonkeyPatch, *, times: int = 1) -> None:
    """The segment's transaction meets a real database error (raised by the server) just
    before it settles, ``times`` times."""
    real = faults.point
    left = {"n": times}

    def point(name: str) -> None:
        if name == "before_settle" and left["n"] > 0:
            left["n"] -= 1
            with connection.cursor() as cursor:
                cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION '{SENTINEL}' USING ERRCODE = '{condition}'; END $$")
        real(name)

    monkeypatch.setattr(faults, "point", point)


@pytest.mark.django_db(transaction=True)
def test_a_database_error_in_a_segment_fails_with_framework_text_only(
    deploy: Any, drain: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """last_error and the run's failure named the exception class ("database error
    (IntegrityError)"); they carry framework text and the SQLSTATE only."""
    deploy(WAITS)
    failing_before_settle("check_violation", monkeypatch)
    recorded = operations.start(definition_id="waits", payload={})
    drain(recorded.run_id)
    start = Command.objects.get(pk=recorded.command_id)
    run = Run.objects.get(pk=recorded.run_id)
    assert start.status == "FAILED" and run.status == "FAILED"
    assert start.last_error == "DETERMINISTIC_FAILURE: database error (sqlstate 23514)"
    assert run.failure_message == start.last_error
    for text in (start.last_error, run.failure_message):
        assert "Error" not in text and SENTINEL not in text


@pytest.mark.django_db(transaction=True)
def test_a_transient_database_error_in_a_segment_is_retried_with_framework_text_only(
    deploy: Any, drain: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(WAITS)
    failing_before_settle("serialization_failure", monkeypatch)
    recorded = operations.start(definition_id="waits", payload={})
    executor.process(executor.peek(10, recorded.run_id)[0])
    start = Command.objects.get(pk=recorded.command_id)
    assert start.status == "PENDING" and start.transient_count == 1
    assert start.last_error == "TRANSIENT: database failure (sqlstate 40001)"
    db.execute("UPDATE workflow_commands SET available_at = now() WHERE id = %s", [start.pk])
    drain(recorded.run_id)
    assert Run.objects.get(pk=recorded.run_id).status == "WAITING"


@pytest.mark.django_db(transaction=True)
def test_a_dead_lettered_start_names_no_class(deploy: Any) -> None:
    deploy(WAITS)
    recorded = operations.start(definition_id="waits", payload={})
    dead_letter_next_command(recorded.run_id)
    start = Command.objects.get(pk=recorded.command_id)
    assert start.status == "DEAD" and start.last_error.startswith("MAX_ATTEMPTS: ")
    assert "Error" not in start.last_error


# --- named conditions in a decision's when (definition-documents: evaluation environment) ------

SMALL_CALLS: list[Any] = []


@catalogs.callbacks.register("test.purchase_small", category="condition")
def purchase_small(state: Any) -> bool:
    SMALL_CALLS.append(state["total"])
    return bool(state["total"] < 100)


ROUTED = """
definitionId: routed
definitionVersion: 1
contract: {name: routed.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: route
steps:
  - id: route
    type: decision
    routes:
      - when: "conditions['test.purchase_small'] && state.rush"
        to: express
      - when: "conditions['test.purchase_small']"
        to: small
    default: big
  - {id: express, type: complete}
  - {id: small, type: complete}
  - {id: big, type: complete}
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("payload", "route"),
    [({"total": 10, "rush": True}, "express"), ({"total": 10, "rush": False}, "small"), ({"total": 500}, "big")],
)
def test_a_when_routes_on_a_named_condition_evaluated_once_per_decision(
    deploy: Any, drain: Any, payload: dict[str, Any], route: str
) -> None:
    deploy(ROUTED)
    SMALL_CALLS.clear()
    recorded = operations.start(definition_id="routed", payload={"rush": False, **payload})
    drain(recorded.run_id)
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.current_step) == ("COMPLETED", route)
    decided = HistoryEntry.objects.filter(run_id=run.id, type="DECISION", step="route").values_list(
        "outcome", flat=True
    )
    assert list(decided) == [route]
    assert [payload["total"]] == SMALL_CALLS  # read by two routes, evaluated once


# --- retry: dead letters offered again, nothing to recover (issue #26: untested paths) ------------

TWO_WAITS = """
definitionId: two-waits
definitionVersion: 1
contract: {name: two-waits.v1, signals: {first: null, second: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-first
steps:
  - {id: wait-first, type: wait-signal, signal: first, next: wait-second}
  - {id: wait-second, type: wait-signal, signal: second, next: done}
  - {id: done, type: complete}
"""


@pytest.mark.django_db(transaction=True)
def test_retry_offers_a_dead_lettered_signal_again_and_it_is_applied(deploy: Any, drain: Any) -> None:
    deploy(TWO_WAITS)
    recorded = operations.start(definition_id="two-waits", payload={})
    drain(recorded.run_id)
    sent = operations.signal(run_id=recorded.run_id, name="first")
    assert dead_letter_next_command(recorded.run_id) == sent.command_id
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.current_step, run.open_signals) == ("WAITING", "wait-first", 0)
    assert Command.objects.get(pk=sent.command_id).status == "DEAD"

    retry = operations.retry(run_id=run.id)
    drain(run.id)
    run.refresh_from_db()
    assert (run.status, run.current_step, run.open_signals) == ("WAITING", "wait-second", 0)
    signal = Command.objects.get(pk=sent.command_id)
    assert signal.status == "COMPLETE" and signal.attempts == 1  # offered again with attempts zeroed
    offered = HistoryEntry.objects.get(run_id=run.id, type="DEAD_LETTERS_REOFFERED")
    assert offered.command_id == retry.command_id and offered.payload == {"count": 1}
    assert Command.objects.get(pk=retry.command_id).status == "COMPLETE"


@pytest.mark.django_db(transaction=True)
def test_a_retry_that_finds_nothing_to_recover_settles_stale(deploy: Any, drain: Any) -> None:
    """Two retries recorded for one dead letter (the second by a recorder that did not see the
    first): the first offers it again, the second finds nothing to recover."""
    from django.db import transaction

    from workflows.engine import commands, locks
    from workflows.engine.actors import NONE

    deploy(TWO_WAITS)
    recorded = operations.start(definition_id="two-waits", payload={})
    drain(recorded.run_id)
    operations.signal(run_id=recorded.run_id, name="first")
    dead_letter_next_command(recorded.run_id)
    first = operations.retry(run_id=recorded.run_id)
    with transaction.atomic():
        run_row = locks.lock_run(recorded.run_id)
        second = commands.insert(run_row, kind="RETRY", actor=NONE, persist_counters=True)
    drain(recorded.run_id)
    assert Command.objects.get(pk=first.command_id).status == "COMPLETE"
    late = Command.objects.get(pk=second["id"])
    assert late.status == "STALE"
    assert late.last_error == "NOTHING_TO_RECOVER: the run is neither failed nor holds a dead-lettered command"
    assert HistoryEntry.objects.filter(command_id=late.pk, type="COMMAND_STALE", outcome="NOTHING_TO_RECOVER").exists()
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.current_step) == ("WAITING", "wait-second")


@pytest.mark.django_db(transaction=True)
def test_a_retry_of_a_run_with_nothing_to_retry_is_refused_when_recorded(deploy: Any, drain: Any) -> None:
    from workflows.exceptions import SignalRejected

    deploy(TWO_WAITS)
    recorded = operations.start(definition_id="two-waits", payload={})
    drain(recorded.run_id)
    with pytest.raises(SignalRejected):
        operations.retry(run_id=recorded.run_id)
    assert not Command.objects.filter(run_id=recorded.run_id, kind="RETRY").exists()
