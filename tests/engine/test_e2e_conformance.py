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
