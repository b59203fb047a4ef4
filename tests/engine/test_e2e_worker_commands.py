"""Signals, timeouts, cancel, dead letters and deferral through a real Celery worker and beat.

The in-process versions of these flows (``executor.drain``) are in
test_recording_and_executor.py; here every command is run by the worker, and a test records
in one transaction what must reach the worker together (the wake-up goes out on commit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from tests.engine import documents
from tests.support.ops import make_due
from tests.support.waiting import eventually
from workflows import conf, operations
from workflows.engine import db
from workflows.exceptions import IdempotencyConflict, SignalRejected
from workflows.models import Command, HistoryEntry, Run, Timer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SENTINEL = "LEAK-SENTINEL-7f3a"
# the service step's handler is registered in the worker too (test.reserve is in-process only)
ORDER_SIGNAL = documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")

# waits at `first` (with a timeout), then at `second`: a `second` sent early is parked
TWO_WAITS = """
definitionId: two-waits
definitionVersion: 1
contract: {name: two-waits.v1, signals: {first: null, second: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-first
steps:
  - id: wait-first
    type: wait-signal
    signal: first
    next: wait-second
    timeout:
      after: PT1H
      next: expired
  - id: wait-second
    type: wait-signal
    signal: second
    next: done
  - id: done
    type: complete
  - id: expired
    type: fail
    errorType: too-late
"""

# the first step's condition crashes the worker process while the gate file exists
CRASHING = documents.gated("crashing", "test.exit_while_gate")


def history_types(run_id: Any) -> list[str]:
    return list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))


def history_is_gapless(run_id: Any) -> bool:
    seqs = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
    return seqs == list(range(1, len(seqs) + 1))


def command_statuses(run_id: Any) -> list[tuple[str, str]]:
    return list(Command.objects.filter(run_id=run_id).order_by("seq").values_list("kind", "status"))


def status_of(run_id: Any) -> str:
    return Run.objects.get(pk=run_id).status


def wait_for_status(run_id: Any, status: str, worker: Any, *, timeout: float = 60) -> None:
    eventually(
        lambda: status_of(run_id) == status,
        timeout=timeout,
        what=f"the run to be {status}",
        details=worker.logs,
    )


def settle(run_id: Any, worker: Any) -> operations.IdleReport:
    report = operations.await_idle(60, run_id=run_id)
    assert report.idle, worker.logs()
    return report


def test_signal_sent_before_the_wait_is_applied_once_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(ORDER_SIGNAL)
    # one commit: the worker first sees the start with the signal queued behind it
    with transaction.atomic():
        recorded = operations.start(definition_id="order-signal", payload={"order": "W-2"})
        sent = operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 3})
        assert sent.seq > recorded.seq
        assert command_statuses(recorded.run_id) == [("START", "PENDING"), ("SIGNAL", "PENDING")]
    settle(recorded.run_id, celery_worker_process)
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "COMPLETED", celery_worker_process.logs()
    assert run.state == {"order": "W-2", "paid": 3}
    assert run.open_signals == 0
    assert sorted(command_statuses(run.id)) == [("SIGNAL", "COMPLETE"), ("START", "COMPLETE"), ("TIMER", "CANCELLED")]
    signal = Command.objects.get(run_id=run.id, kind="SIGNAL")
    assert signal.attempts == 1
    types = history_types(run.id)
    assert types.count("SIGNAL_RECEIVED") == 1 and types.count("WORKFLOW_COMPLETED") == 1
    # applied at the wait, after the start reached it
    assert types.index("WORKFLOW_STARTED") < types.index("SIGNAL_RECEIVED")
    assert history_is_gapless(run.id)


def test_duplicate_signal_key_has_one_effect_and_conflicting_payload_is_refused_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": "W-4"})
    wait_for_status(recorded.run_id, "WAITING", celery_worker_process)

    first = operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 5}, idempotency_key="k1")
    again = operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 5}, idempotency_key="k1")
    assert again.command_id == first.command_id and again.replay and not first.replay
    with pytest.raises(IdempotencyConflict) as refused:
        operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": SENTINEL}, idempotency_key="k1")
    assert refused.value.code == "IDEMPOTENCY_CONFLICT"
    assert SENTINEL not in str(refused.value)

    settle(recorded.run_id, celery_worker_process)
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "COMPLETED", celery_worker_process.logs()
    assert run.state["paid"] == 5
    assert list(Command.objects.filter(run_id=run.id, kind="SIGNAL").values_list("id", "status")) == [
        (first.command_id, "COMPLETE")
    ]
    assert history_types(run.id).count("SIGNAL_RECEIVED") == 1

    # a duplicate after the run ended still answers the first recording and records nothing
    entries = HistoryEntry.objects.filter(run_id=run.id).count()
    late = operations.signal(run_id=run.id, name="paid", payload={"amount": 5}, idempotency_key="k1")
    assert late.command_id == first.command_id and late.replay
    settle(run.id, celery_worker_process)
    assert Command.objects.filter(run_id=run.id, kind="SIGNAL").count() == 1
    assert HistoryEntry.objects.filter(run_id=run.id).count() == entries


def test_timeout_beats_a_late_signal_through_the_worker(celery_worker_process: Any, deploy: Any) -> None:
    deploy(ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": "W-5"})
    wait_for_status(recorded.run_id, "WAITING", celery_worker_process)
    timeout = Command.objects.get(run_id=recorded.run_id, kind="TIMER")
    assert timeout.status == "PENDING"

    # one commit: the timeout is due, and the signal is recorded after its fire time, so the
    # worker sees both at once (a sweep between the two would refuse the signal instead)
    with transaction.atomic():
        make_due(recorded.run_id, "TIMEOUT")
        late = operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 1})
        timeout.refresh_from_db()
        assert Command.objects.get(pk=late.command_id).recorded_at > timeout.fire_at

    settle(recorded.run_id, celery_worker_process)
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "FAILED" and run.failure_code == "payment-timeout", celery_worker_process.logs()
    assert run.state["paid"] == 0.0  # the signal's amount never reached the state
    timeout.refresh_from_db()
    assert timeout.status == "COMPLETE" and timeout.attempts == 1
    assert Timer.objects.get(run_id=run.id).status == "FIRED"
    # a failed run parks the signal (it keeps its slot; a retry could still meet it)
    signal = Command.objects.get(pk=late.command_id)
    assert signal.status == "PARKED" and run.open_signals == 1
    types = history_types(run.id)
    assert types.count("TIMEOUT") == 1 and "SIGNAL_RECEIVED" not in types
    assert types.count("SIGNAL_PARKED") == 1 and types.count("WORKFLOW_FAILED") == 1
    assert history_is_gapless(run.id)


def test_cancel_of_a_waiting_run_settles_every_open_command_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(TWO_WAITS)
    recorded = operations.start(definition_id="two-waits", payload={})
    wait_for_status(recorded.run_id, "WAITING", celery_worker_process)
    early = operations.signal(run_id=recorded.run_id, name="second")  # not awaited yet: the worker parks it
    eventually(
        lambda: Command.objects.get(pk=early.command_id).status == "PARKED",
        timeout=60,
        what="the early signal to be parked",
        details=celery_worker_process.logs,
    )
    timeout = Command.objects.get(run_id=recorded.run_id, kind="TIMER")
    assert timeout.status == "PENDING"
    # a signal still queued (PENDING) when the cancel commits: the worker never sees it
    with transaction.atomic():
        queued = operations.signal(run_id=recorded.run_id, name="first")
        assert Run.objects.get(pk=recorded.run_id).open_signals == 2
        operations.cancel(run_id=recorded.run_id, reason="customer asked")

    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "CANCELLED" and run.open_signals == 0 and run.wait is None
    open_ones = {early.command_id, queued.command_id, timeout.id}
    assert dict(Command.objects.filter(id__in=open_ones).values_list("id", "status")) == dict.fromkeys(
        open_ones, "CANCELLED"
    )
    assert Timer.objects.get(run_id=run.id).status == "CANCELLED"
    assert not Command.objects.filter(run_id=run.id, status__in=["PENDING", "DEFERRED", "CLAIMED", "PARKED"]).exists()
    types = history_types(run.id)
    assert types.count("COMMAND_CANCELLED") == 3 and types.count("WORKFLOW_CANCELLED") == 1

    # the worker, woken or sweeping, finds nothing left to do and changes nothing
    settle(run.id, celery_worker_process)
    assert history_types(run.id) == types
    assert status_of(run.id) == "CANCELLED"
    assert history_is_gapless(run.id)
    with pytest.raises(SignalRejected) as refused:
        operations.signal(run_id=run.id, name="first")
    assert refused.value.code == "SIGNAL_REJECTED"


def test_failing_command_dead_letters_and_retry_recovers_through_the_worker(
    celery_worker_process: Any, deploy: Any, tmp_path: Path
) -> None:
    max_attempts = conf.get().EXECUTOR.MAX_ATTEMPTS
    deploy(CRASHING)
    gate = tmp_path / "gate"
    gate.touch()
    exits = gate.with_suffix(".exits")
    recorded = operations.start(definition_id="crashing", payload={"gate": str(gate)})

    # every attempt crashes the worker process mid-segment; after each lease lapses the
    # sweep offers the command again, until its attempts are spent and it is dead-lettered
    start = eventually(
        lambda: Command.objects.filter(run_id=recorded.run_id, kind="START", status="DEAD").first(),
        timeout=240,
        what="the start to be dead-lettered",
        details=celery_worker_process.logs,
    )
    assert start.attempts == max_attempts
    assert start.last_error.startswith("MAX_ATTEMPTS: ")
    assert len(exits.read_text().splitlines()) == max_attempts  # no attempt beyond the limit
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "FAILED" and run.failure_code == "MAX_ATTEMPTS"
    # the crashed segments left nothing behind: only the dead letter and the failure
    assert history_types(run.id) == ["COMMAND_DEAD", "WORKFLOW_FAILED"]
    report = settle(run.id, celery_worker_process)
    assert [c["id"] for c in report.stuck] == [start.id]  # the probe reports the dead letter

    gate.unlink()
    retry = operations.retry(run_id=run.id)
    wait_for_status(run.id, "WAITING", celery_worker_process)
    settle(run.id, celery_worker_process)
    run.refresh_from_db()
    assert run.current_step == "wait-go" and run.failure_code == ""
    assert Command.objects.get(pk=retry.command_id).status == "COMPLETE"
    start.refresh_from_db()
    assert start.status == "SUPERSEDED"
    types = history_types(run.id)
    assert types.count("COMMAND_SUPERSEDED") == 1 and types.count("WORKFLOW_STARTED") == 1
    assert len(exits.read_text().splitlines()) == max_attempts  # the retry ran with the gate gone

    operations.signal(run_id=run.id, name="go")
    settle(run.id, celery_worker_process)
    assert status_of(run.id) == "COMPLETED"
    assert history_is_gapless(run.id)


def test_node_without_the_plan_defers_without_spending_attempts_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(ORDER_SIGNAL)
    # one commit: the worker never sees the run with the plan it can build
    with transaction.atomic():
        recorded = operations.start(definition_id="order-signal", payload={"order": "W-7"})
        pinned = Run.objects.get(pk=recorded.run_id).plan_hash
        db.execute("UPDATE workflow_runs SET plan_hash = 'f' || substr(plan_hash, 2) WHERE id = %s", [recorded.run_id])
    assert Run.objects.get(pk=recorded.run_id).plan_hash != pinned

    # deferred by the wake-up, then (its back-off over) again by the sweep
    start = eventually(
        lambda: Command.objects.filter(run_id=recorded.run_id, kind="START", deferral_count__gte=2).first(),
        timeout=90,
        what="the start to be deferred twice",
        details=celery_worker_process.logs,
    )
    assert start.status == "DEFERRED" and start.attempts == 0
    assert history_types(recorded.run_id) == ["COMMAND_DEFERRED"]  # once, however often deferred
    assert status_of(recorded.run_id) == "PENDING"
    report = settle(recorded.run_id, celery_worker_process)  # a deferred command is not runnable
    assert [c["id"] for c in report.deferred] == [start.id]

    # the plan is buildable again: the next offer runs the start (one attempt)
    db.execute("UPDATE workflow_runs SET plan_hash = %s WHERE id = %s", [pinned, recorded.run_id])
    wait_for_status(recorded.run_id, "WAITING", celery_worker_process)
    start.refresh_from_db()
    assert start.status == "COMPLETE" and start.attempts == 1 and start.deferral_count >= 2
    types = history_types(recorded.run_id)
    assert types.count("COMMAND_DEFERRED") == 1 and types.count("WORKFLOW_STARTED") == 1
    assert history_is_gapless(recorded.run_id)
