"""Fork/join, calls and sagas through a real Celery worker (and a worker killed mid-saga)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_forks_and_calls import CHILD, MIDDLE, PARENT, fork_doc
from tests.support.waiting import eventually
from workflows import operations, queries
from workflows.models import Run, Task, Timer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _status(run_id: Any) -> str:
    return Run.objects.get(pk=run_id).status


def test_three_branch_fork_joins_through_the_worker(celery_worker_process: Any, deploy: Any) -> None:
    deploy(fork_doc("all"))
    run_id = operations.start(definition_id="reviews", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run_id=run_id, status="OPEN").count() == 2,
        timeout=30,
        what="two branch approvals",
        details=celery_worker_process.logs,
    )
    for task in Task.objects.filter(run_id=run_id, status="OPEN"):
        operations.complete_task(task_id=task.id, decision="approve")
    operations.signal(run_id=run_id, name="legal-ok", branch="legal")
    eventually(lambda: _status(run_id) == "COMPLETED", timeout=30, what="the join", details=celery_worker_process.logs)
    assert Run.objects.get(pk=run_id).state == {"finance": "ok", "security": "ok", "legal": "ok"}


def test_cancelling_a_two_level_call_chain_withdraws_every_approval(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(CHILD)
    deploy(MIDDLE)
    deploy(PARENT)
    top = operations.start(definition_id="parent", payload={}).run_id
    eventually(
        lambda: queries.tasks_for(demo_users["alice"]).count() == 2,
        timeout=30,
        what="the grandchild's approvals in alice's inbox",
        details=celery_worker_process.logs,
    )
    operations.cancel(run_id=top, reason="not needed")
    assert queries.tasks_for(demo_users["alice"]).count() == 0
    statuses = set(Run.objects.values_list("status", flat=True))
    assert statuses == {"CANCELLED"}
    assert not Timer.objects.filter(status="SCHEDULED").exists()
    report = operations.await_idle(10)
    assert report.idle and set(Run.objects.values_list("status", flat=True)) == {"CANCELLED"}


SAGA = """
definitionId: saga-e2e
definitionVersion: 1
contract: {name: saga-e2e.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: one
steps:
  - {id: one, type: service, target: test.saga_do, compensation: undo-one, next: two}
  - {id: two, type: service, target: test.saga_do, compensation: undo-two, next: three}
  - {id: three, type: service, target: test.saga_do, compensation: undo-three, next: boom}
  - {id: boom, type: fail, errorType: out-of-stock}
  - id: undo-one
    type: compensation
    forwardStep: one
    target: test.saga_undo
    payload: "{'step': 'one', 'undo_log': state.undo_log, 'gate': state.gate}"
  - id: undo-two
    type: compensation
    forwardStep: two
    target: test.saga_undo
    payload: "{'step': 'two', 'undo_log': state.undo_log, 'gate': state.gate}"
  - id: undo-three
    type: compensation
    forwardStep: three
    target: test.saga_undo
    payload: "{'step': 'three', 'undo_log': state.undo_log, 'gate': state.gate}"
"""


def test_saga_compensates_in_reverse_order_once_when_a_worker_dies_mid_compensation(
    celery_worker_process: Any, crash_celery_worker: Any, deploy: Any, tmp_path: Path
) -> None:
    log = tmp_path / "undo.log"
    gate = tmp_path / "gate"
    gate.touch()
    deploy(SAGA)
    run_id = operations.start(definition_id="saga-e2e", payload={"undo_log": str(log), "gate": str(gate)}).run_id
    eventually(
        lambda: gate.with_suffix(".entered").exists(),
        timeout=30,
        what="the first compensation to start",
        details=celery_worker_process.logs,
    )
    crash_celery_worker()  # killed inside the first compensation's delivery
    gate.unlink()
    eventually(
        lambda: log.exists() and len(log.read_text().splitlines()) >= 3,
        timeout=90,
        what="all compensations",
        details=celery_worker_process.logs,
    )
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    effects: dict[str, str] = {}
    for line in lines:  # the receiver applies each idempotency key once
        effects.setdefault(line["key"], line["step"])
    assert list(effects.values()) == ["three", "two", "one"]
    assert _status(run_id) == "COMPENSATED"
