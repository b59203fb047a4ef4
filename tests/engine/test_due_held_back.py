"""A due date claimed just before a completion is recorded goes back to the queue (held
back behind the COMPLETING task) instead of settling stale — so a completion the executor
rejects later reopens a task that still has its due date."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.engine.test_recording_and_executor import make_due
from workflows import operations
from workflows.engine import executor, segment
from workflows.models import Command, Task

DUE_DOC = """
definitionId: due-review
definitionVersion: 1
contract: {name: due.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: review
steps:
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    due: {after: PT1H, next: late}
    decisions:
      - name: approve
        payloadSchema: {type: object, properties: {n: {type: integer, maximum: 5}}}
        next: done
  - {id: done, type: complete}
  - {id: late, type: fail, errorType: late}
"""


@pytest.mark.django_db(transaction=True)
def test_due_date_meeting_a_completing_task_is_requeued(deploy: Any, drain: Any) -> None:
    deploy(DUE_DOC)
    run_id = operations.start(definition_id="due-review", payload={}).run_id
    drain()
    make_due(run_id, "DUE")
    head = executor.peek(5, run_id)[0]
    assert head.kind == "TIMER"
    token = executor.claim(head, lease_seconds=30, max_attempts=5)
    task = Task.objects.get(run_id=run_id)
    # recorded while the due date is claimed
    operations.complete_task(task_id=task.id, decision="approve", payload={"n": 3})
    settle = segment.run(
        command_id=head.id,
        run_id=run_id,
        token=token,
        plan=executor._plan_for(head),
        executor_id="test",
        deadline=time.monotonic() + 20,
        max_steps=100,
    )
    assert settle.status == "REQUEUE"
    due = Command.objects.get(pk=head.id)
    assert due.status == "PENDING" and due.attempts == 0
    drain()
    assert Task.objects.get(pk=task.id).status == "COMPLETED"
    assert Command.objects.get(pk=head.id).status == "CANCELLED"
