"""The engine through a real Celery worker and beat: wake-ups, sweep and crash recovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine import documents
from tests.support.waiting import eventually
from workflows import operations
from workflows.models import Command, HistoryEntry, Run

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GATED = documents.gated("gated", "test.block_while_gate")


def test_start_service_wait_signal_complete_through_the_worker(celery_worker_process: Any, deploy: Any) -> None:
    deploy(documents.ORDER_SIGNAL.replace("test.reserve", "test.noop"))
    recorded = operations.start(definition_id="order-signal", payload={"order": "E-1"})
    eventually(
        lambda: Run.objects.get(pk=recorded.run_id).status == "WAITING",
        timeout=30,
        what="the run to wait for payment",
        details=celery_worker_process.logs,
    )
    operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 9})
    report = operations.await_idle(30, run_id=recorded.run_id)
    assert report.idle
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "COMPLETED" and run.state["paid"] == 9
    eventually(
        lambda: not run.intents.exclude(status="DELIVERED").exists(),
        timeout=30,
        what="the service intent to be delivered",
        details=celery_worker_process.logs,
    )


def test_worker_killed_mid_segment_another_finishes_without_duplicates(
    celery_worker_process: Any, crash_celery_worker: Any, deploy: Any, tmp_path: Path
) -> None:
    deploy(GATED)
    gate = tmp_path / "gate"
    gate.touch()
    recorded = operations.start(definition_id="gated", payload={"gate": str(gate)})
    eventually(
        lambda: gate.with_suffix(".entered").exists(),
        timeout=30,
        what="the segment to start",
        details=celery_worker_process.logs,
    )
    crash_celery_worker()  # SIGKILL mid-segment; a new worker starts
    gate.unlink()
    # the lease lapses, the sweep returns the command, the new worker runs it
    eventually(
        lambda: Run.objects.get(pk=recorded.run_id).status == "WAITING",
        timeout=60,
        what="another worker to finish the start",
        details=celery_worker_process.logs,
    )
    start = Command.objects.get(run_id=recorded.run_id, kind="START")
    assert start.status == "COMPLETE" and start.attempts == 2
    types = list(HistoryEntry.objects.filter(run_id=recorded.run_id).order_by("seq").values_list("type", flat=True))
    assert types.count("WORKFLOW_STARTED") == 1 and types.count("STATE_BASELINE") == 1
    seqs = list(HistoryEntry.objects.filter(run_id=recorded.run_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
