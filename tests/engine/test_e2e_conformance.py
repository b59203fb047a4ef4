"""Engine conformance (issue #26) through a real Celery worker and beat (lease 6 s here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import eventually
from workflows import operations
from workflows.models import Command, HistoryEntry, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FLAKY_INITIAL_STATE = """
definitionId: flaky-initial-state
definitionVersion: 1
contract: {name: flaky-initial-state.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStateMapper: test.initial_while_gate
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


def history_types(run_id: Any) -> list[str]:
    return list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))


def test_a_failing_initial_state_keeps_the_run_pending_and_is_claimed_again_through_the_worker(
    celery_worker_process: Any, deploy: Any, tmp_path: Path
) -> None:
    """An initial-state mapper that threw failed the run at once (FAILED, a retry needed). The
    reference rolls the segment back and the run stays PENDING while the claim lapses and is
    claimed again (engine.txt 183): a failure of the moment heals by itself."""
    deploy(FLAKY_INITIAL_STATE)
    gate = tmp_path / "gate"
    gate.touch()
    recorded = operations.start(definition_id="flaky-initial-state", payload={"gate": str(gate)})

    def claimed_again() -> bool:
        return Command.objects.get(pk=recorded.command_id).attempts >= 2

    eventually(claimed_again, timeout=60, what="the start to be claimed again", details=celery_worker_process.logs)
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.state, run.current_step) == ("PENDING", None, None)
    assert not {"WORKFLOW_STARTED", "WORKFLOW_FAILED", "FAILED"} & set(history_types(run.id))
    assert Command.objects.get(pk=recorded.command_id).status in ("CLAIMED", "PENDING")

    gate.unlink()  # what the mapper looks up is there now
    eventually(
        lambda: Run.objects.get(pk=recorded.run_id).status == "WAITING",
        timeout=60,
        what="the run to start",
        details=celery_worker_process.logs,
    )
    run.refresh_from_db()
    assert run.state == {"gate": str(gate), "initialised": True}
    assert run.current_step == "wait-go"
    start = Command.objects.get(pk=recorded.command_id)
    assert start.status == "COMPLETE" and start.attempts >= 2
    assert history_types(run.id).count("WORKFLOW_STARTED") == 1


# --- recovery paths that worked but were unproven (issue #26) -------------------------------------

FLAKY_TIMEOUT = """
definitionId: flaky-timeout
definitionVersion: 1
contract: {name: flaky-timeout.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - id: wait-go
    type: wait-signal
    signal: go
    next: done
    timeout:
      after: PT1S
      next: expired
      mutator: test.mutator_while_gate
  - {id: done, type: complete}
  - {id: expired, type: complete}
"""

LOOPING = """
definitionId: looping
definitionVersion: 1
contract: {name: looping.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: a
steps:
  - id: a
    type: decision
    routes: [{when: "true", to: b}]
    default: b
  - id: b
    type: decision
    routes: [{when: "true", to: a}]
    default: done
  - {id: done, type: complete}
"""


def wait_for(run_id: Any, status: str, worker: Any) -> Run:
    eventually(
        lambda: Run.objects.get(pk=run_id).status == status,
        timeout=60,
        what=f"the run to be {status}",
        details=worker.logs,
    )
    return Run.objects.get(pk=run_id)


def test_a_run_that_failed_while_waiting_is_retried_at_its_wait_with_its_timer_rearmed(
    celery_worker_process: Any, deploy: Any, tmp_path: Path
) -> None:
    """A timeout whose segment failed fails the run while it waits; retry returns it to that
    wait and offers the failed timer again with its original fire time, so it fires once more
    (engine.txt: rearmTimers)."""
    deploy(FLAKY_TIMEOUT)
    gate = tmp_path / "gate"
    gate.touch()
    recorded = operations.start(definition_id="flaky-timeout", payload={"gate": str(gate)})
    run = wait_for(recorded.run_id, "FAILED", celery_worker_process)
    assert run.current_step == "wait-go"
    failed = Command.objects.get(run_id=run.id, kind="TIMER")
    assert failed.status == "FAILED"

    gate.unlink()
    retry = operations.retry(run_id=run.id)
    run = wait_for(run.id, "COMPLETED", celery_worker_process)
    assert run.current_step == "expired" and run.state["timed_out"] is True
    timers = list(Command.objects.filter(run_id=run.id, kind="TIMER").order_by("seq"))
    assert [(t.status, t.timer_id) for t in timers] == [("FAILED", failed.timer_id), ("COMPLETE", failed.timer_id)]
    assert timers[1].fire_at == failed.fire_at  # the original fire time, not a new delay
    assert Command.objects.get(pk=retry.command_id).status == "COMPLETE"
    decisions = HistoryEntry.objects.filter(run_id=run.id, type="DECISION").values_list("step", "outcome")
    assert ("wait-go", "retry") in list(decisions)
    assert history_types(run.id).count("WORKFLOW_FAILED") == 1


def test_a_segment_beyond_the_step_limit_fails_the_run_with_step_limit(celery_worker_process: Any, deploy: Any) -> None:
    deploy(LOOPING)
    recorded = operations.start(definition_id="looping", payload={})
    run = wait_for(recorded.run_id, "FAILED", celery_worker_process)
    start = Command.objects.get(pk=recorded.command_id)
    assert start.status == "FAILED"
    assert start.last_error == "STEP_LIMIT: the segment ran more nodes than maxStepsPerSegment"
    assert (run.failure_code, run.failure_message) == ("STEP_LIMIT", start.last_error)
    assert run.state is None  # the overrun segment rolled back whole
    assert HistoryEntry.objects.filter(run_id=run.id, type="COMMAND_FAILED", outcome="STEP_LIMIT").count() == 1
