"""A task's due date and reminders through a real Celery worker and beat.

Each timer is a TIMER command on the run's queue; these tests wait on the database for what
the worker did (``eventually``), never on a clock in the test.
"""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
from django.db import transaction

from tests.support.waiting import eventually
from workflows import definitions, operations, queries
from workflows.engine import db
from workflows.models import Command, HistoryEntry, Run, Task, Timer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TIMED = """
definitionId: timed-approval
definitionVersion: 1
contract: {{name: timed-approval.v1, signals: {{}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review {{{{ state.number }}}}"
    assignment: {{mode: group, value: approvers}}
{timing}
    decisions:
      - name: approve
        payloadSchema: {{type: object, properties: {{comment: {{type: string}}}}}}
        next: done
  - id: escalate
    type: human-task
    title: "Overdue: {{{{ state.number }}}}"
    assignment: {{mode: user, value: admin}}
    decisions:
      - {{name: approve, next: done}}
  - id: done
    type: complete
"""


def deploy(timing: str) -> None:
    ref = definitions.load(scope="default", text=TIMED.format(timing=timing), format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def open_task(worker: Any, timing: str) -> Task:
    deploy(timing)
    run_id = operations.start(definition_id="timed-approval", payload={"number": "T-1"}).run_id
    return eventually(
        lambda: Task.objects.filter(run_id=run_id, step="review").first(),
        timeout=30,
        what="the review task to open",
        details=worker.logs,
    )


def history(run_id: Any) -> list[str]:
    return list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))


def test_a_due_date_expires_the_task_and_takes_the_due_branch(
    celery_worker_process: Any, demo_users: dict[str, Any]
) -> None:
    task = open_task(celery_worker_process, "    due: {after: PT2S, next: escalate}")
    assert task.due_at is not None

    escalation = eventually(
        lambda: Task.objects.filter(run_id=task.run_id, step="escalate").first(),
        timeout=30,
        what="the due date to fire",
        details=celery_worker_process.logs,
    )
    task.refresh_from_db()
    assert task.status == "EXPIRED"
    assert escalation.status == "OPEN" and escalation.assignment_value == "admin"
    run = Run.objects.get(pk=task.run_id)
    assert run.status == "WAITING" and run.current_step == "escalate"
    due = Command.objects.get(run_id=task.run_id, kind="TIMER", timer_kind="DUE")
    assert due.status == "COMPLETE"
    assert "TASK_EXPIRED" in history(task.run_id)
    assert not queries.tasks_for(demo_users["alice"]).exists()
    assert list(queries.tasks_for(demo_users["admin"])) == [escalation]


def test_reminders_recur_anchored_at_the_previous_scheduled_fire(celery_worker_process: Any) -> None:
    task = open_task(celery_worker_process, "    due: {after: PT1H, next: escalate}\n    reminders: {every: PT2S}")

    eventually(
        lambda: Task.objects.get(pk=task.pk).reminder_count >= 3,
        timeout=40,
        what="three reminders",
        details=celery_worker_process.logs,
    )
    operations.cancel(run_id=task.run_id, reason="test over")  # stop the recurrence
    timers = list(Timer.objects.filter(run_id=task.run_id, kind="REMINDER").order_by("id"))
    fired = [t for t in timers if t.status == "FIRED"]
    assert len(fired) >= 3
    for previous, following in pairwise(timers):
        anchored = previous.fire_at + timedelta(seconds=2)
        # the previous scheduled fire plus the interval, not when the segment ran; an instant
        # already past when the next one is recorded (the reminder fired over an interval late,
        # on a loaded machine) is taken as the time of recording, as any timer's (engine.txt)
        late = anchored < following.fire_at and following.fire_at - following.created_at < timedelta(seconds=1)
        assert following.fire_at == anchored or late, "anchored at the previous fire"
    assert history(task.run_id).count("TASK_REMINDER_FIRED") == len(fired)
    notices = Run.objects.get(pk=task.run_id).intents.filter(kind="NOTIFY").values_list("payload", flat=True)
    assert sum(1 for p in notices if p["reason"] == "reminder") == len(fired)
    assert sum(1 for p in notices if p["reason"] == "opened") == 1


def test_a_completion_is_never_overtaken_by_a_due_date_that_is_already_due(
    celery_worker_process: Any, demo_users: dict[str, Any]
) -> None:
    task = open_task(celery_worker_process, "    due: {after: PT1H, next: escalate}")

    with transaction.atomic():
        # the due date is due before the completion is recorded, and earlier in the queue
        db.execute(
            "UPDATE workflow_commands SET fire_at = now() - interval '1 minute', order_at = now() - interval "
            "'1 minute', available_at = now() - interval '1 minute' WHERE run_id = %s AND timer_kind = 'DUE'",
            [task.run_id],
        )
        db.execute(
            "UPDATE workflow_timers SET fire_at = now() - interval '1 minute' WHERE run_id = %s AND kind = 'DUE'",
            [task.run_id],
        )
        operations.complete_task(
            task_id=task.id, decision="approve", payload={"comment": "in time"}, actor=demo_users["alice"]
        )

    eventually(
        lambda: Run.objects.get(pk=task.run_id).status == "COMPLETED",
        timeout=30,
        what="the completion to be applied",
        details=celery_worker_process.logs,
    )
    task.refresh_from_db()
    assert task.status == "COMPLETED" and task.decision == "approve"
    due = Command.objects.get(run_id=task.run_id, kind="TIMER", timer_kind="DUE")
    assert due.status == "CANCELLED"
    assert Timer.objects.get(run_id=task.run_id, kind="DUE").status == "CANCELLED"
    types = history(task.run_id)
    assert "TASK_COMPLETED" in types and "TASK_EXPIRED" not in types
    assert not Task.objects.filter(run_id=task.run_id, step="escalate").exists()
