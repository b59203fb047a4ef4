"""Moves the reference allows that no test walked (issue #26): a run moved to another node of
its own revision (how a stuck run is unstuck), and a run moved back onto an older revision
("the rules are the same in both directions"), through a real Celery worker."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.test_migration import REVISION_1, REVISION_2
from tests.support.waiting import eventually
from workflows import operations, queries
from workflows.engine import history as history_log
from workflows.models import Command, DefinitionVersion, HistoryEntry, Park, Run, Task, Timer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _plan_hash(version: int) -> str:
    return str(DefinitionVersion.objects.get(definition_id="purchase-move", version=version).plan_hash)


def _start_at_review(worker: Any) -> str:
    run_id = operations.start(definition_id="purchase-move", version=1, payload={"route": "review"}).run_id
    eventually(
        lambda: Task.objects.filter(run_id=run_id, step="review", status="OPEN").exists(),
        timeout=60,
        what="alice's review",
        details=worker.logs,
    )
    return run_id


def _move(run_id: str, worker: Any, **kwargs: Any) -> Command:
    recorded = operations.migrate(run_id=run_id, **kwargs)
    eventually(
        lambda: Command.objects.get(pk=recorded.command_id).status not in ("PENDING", "DEFERRED", "CLAIMED"),
        timeout=60,
        what="the migration settled",
        details=worker.logs,
    )
    return Command.objects.get(pk=recorded.command_id)


def _finish(run_id: str, worker: Any) -> None:
    operations.signal(run_id=run_id, name="goods-received")
    eventually(
        lambda: Run.objects.get(pk=run_id).status == "COMPLETED", timeout=60, what="the end", details=worker.logs
    )


def test_a_run_moved_to_another_node_of_its_own_revision_waits_there_and_goes_on(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(REVISION_1)
    run_id = _start_at_review(celery_worker_process)
    due = Timer.objects.get(run_id=run_id, status="SCHEDULED")

    command = _move(run_id, celery_worker_process, target_version=1, target_step="wait-goods", actor="admin")

    assert command.status == "COMPLETE", command.last_error
    run = Run.objects.get(pk=run_id)
    assert (run.version, run.current_step, run.status, run.plan_hash) == (1, "wait-goods", "WAITING", _plan_hash(1))
    assert Task.objects.get(run_id=run_id, step="review").status == "WITHDRAWN"
    assert not queries.tasks_for(demo_users["alice"]).exists()
    assert Timer.objects.get(pk=due.pk).status != "SCHEDULED"  # the review's due date is disarmed
    old, new = Park.objects.filter(run_id=run_id).order_by("id")
    assert (old.left_how, old.moved_to_version, old.moved_to_node) == ("moved", 1, "wait-goods")
    assert (new.version, new.node, new.left_at) == (1, "wait-goods", None)
    migrated = HistoryEntry.objects.get(run_id=run_id, type="WORKFLOW_MIGRATED")
    assert migrated.payload["from"] == {"scope": "default", "version": 1, "step": "review"}
    assert migrated.payload["to"] == {"scope": "default", "version": 1, "step": "wait-goods"}

    _finish(run_id, celery_worker_process)
    assert operations.await_idle(60, run_id=run_id).idle
    assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()


def test_a_run_moved_forward_and_back_onto_its_older_revision_follows_the_older_graph(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(REVISION_1)
    deploy(REVISION_2, activate=False)
    run_id = _start_at_review(celery_worker_process)

    forward = _move(run_id, celery_worker_process, target_version=2, target_step="manager-review")
    assert forward.status == "COMPLETE", forward.last_error
    assert [t.step for t in queries.tasks_for(demo_users["bob"])] == ["manager-review"]

    back = _move(run_id, celery_worker_process, target_version=1, target_step="review", actor="admin")

    assert back.status == "COMPLETE", back.last_error
    run = Run.objects.get(pk=run_id)
    assert (run.version, run.current_step, run.status, run.plan_hash) == (1, "review", "WAITING", _plan_hash(1))
    # the approval is opened afresh with the older revision's assignee and title
    assert not queries.tasks_for(demo_users["bob"]).exists()
    assert [(t.step, t.title) for t in queries.tasks_for(demo_users["alice"])] == [("review", "Review review")]
    assert list(Task.objects.filter(run_id=run_id).order_by("created_at").values_list("step", "status")) == [
        ("review", "WITHDRAWN"),
        ("manager-review", "WITHDRAWN"),
        ("review", "OPEN"),
    ]
    # its due date is the older revision's again (P3D, not P5D), armed once
    due = Timer.objects.get(run_id=run_id, status="SCHEDULED")
    assert 2.9 < (due.fire_at - due.created_at).total_seconds() / 86400 < 3.1
    parks = list(Park.objects.filter(run_id=run_id).order_by("id").values_list("version", "node", "moved_to_version"))
    assert parks == [(1, "review", 2), (2, "manager-review", 1), (1, "review", None)]
    moves = HistoryEntry.objects.filter(run_id=run_id, type="WORKFLOW_MIGRATED").order_by("seq")
    assert [(m.payload["from"]["version"], m.payload["to"]["version"]) for m in moves] == [(1, 2), (2, 1)]

    task = Task.objects.get(run_id=run_id, step="review", status="OPEN")
    operations.complete_task(task_id=task.id, decision="approve", actor=demo_users["alice"])
    eventually(
        lambda: Run.objects.get(pk=run_id).current_step == "wait-goods",
        timeout=60,
        what="the older graph's next node",
        details=celery_worker_process.logs,
    )
    _finish(run_id, celery_worker_process)
    entries = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values())
    assert history_log.replay(entries) == Run.objects.get(pk=run_id).state
