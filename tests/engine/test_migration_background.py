"""Apply in the background: a task applies a migration record batch by batch under a lease,
a record whose task died is resumed by the sweep, a repeated message changes nothing, and an
operator can pause, resume and close it. A run belongs to one open migration at a time.

The task's body (``operations.migration_run_background``) runs in this process here; the
same code runs in a real Celery worker in test_e2e_migrate_background.py.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from tests.engine.test_migration_bulk import REVISION_1, REVISION_2
from workflows import conf, operations, tasks
from workflows.engine import actors
from workflows.engine.migration import apply as migration_apply
from workflows.engine.migration import background
from workflows.exceptions import InvalidPayload, MigrationIllegalState, RunsInOpenMigration
from workflows.models import HistoryEntry, MigrationItem, MigrationRecord, Run

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 7
BATCH = 3


@pytest.fixture
def small_batches(settings: Any) -> Iterator[None]:
    settings.WORKFLOWS = {"MIGRATE": {"APPLY_BATCH": BATCH}}
    conf.reload()
    yield
    settings.WORKFLOWS = {}
    conf.reload()


@pytest.fixture
def parked(deploy: Any, drain: Any, small_batches: None) -> list[str]:
    deploy(REVISION_1)
    deploy(REVISION_2, activate=False)
    runs = [
        operations.start(
            definition_id="bulk-move",
            payload={"route": "review", "amount": 1250, "customer": {"name": "Acme"}},
            business_key=f"R-{i}",
        ).run_id
        for i in range(RUNS)
    ]
    drain()
    assert Run.objects.filter(current_step="review", status="WAITING").count() == RUNS
    return [str(r) for r in runs]


def preview(runs: list[str] | str = "all", **kwargs: Any) -> int:
    record_id = operations.migration_preview(
        scope="default",
        definition_id="bulk-move",
        source_version=1,
        target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "manager-review", "runs": runs}],
        actor=operations_actor(),
        **kwargs,
    )
    assert record_id is not None
    return int(record_id)


def operations_actor() -> Any:
    return actors.service("operator")


def migrated(run_ids: list[str]) -> Counter[str]:
    """WORKFLOW_MIGRATED entries per run: 1 for a run moved once, 0 for a run left alone."""
    found = Counter(
        str(r) for r in HistoryEntry.objects.filter(type="WORKFLOW_MIGRATED").values_list("run_id", flat=True)
    )
    return Counter({r: found.get(r, 0) for r in run_ids})


def items(record_id: int) -> Counter[str]:
    return Counter(MigrationItem.objects.filter(record_id=record_id).values_list("status", flat=True))


def test_apply_answers_at_once_and_the_task_applies_every_batch(parked: list[str], monkeypatch: Any) -> None:
    record_id = preview()
    state = operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    # the press only hands the record over: nothing is moved yet
    assert (state.status, state.left, state.settled) == ("APPLYING", RUNS, 0)
    assert sum(migrated(parked).values()) == 0
    record = MigrationRecord.objects.get(pk=record_id)
    assert record.background and record.applied_by == "operator" and record.lease_token == ""

    batches: list[int] = []
    original = migration_apply.apply_batch

    def counted(**kwargs: Any) -> Any:
        state = original(**kwargs)
        batches.append(state.settled)
        return state

    monkeypatch.setattr(background, "apply_batch", counted)
    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "done"
    assert batches == [3, 6, 7]  # bounded batches of APPLY_BATCH, each committed on its own
    assert migrated(parked) == Counter(dict.fromkeys(parked, 1))
    record.refresh_from_db()
    assert (record.status, record.lease_token) == ("DONE", "")
    assert items(record_id) == Counter({"MOVED": RUNS})
    # the batches are attributed to who pressed Apply, as a press's own batch is
    assert set(
        HistoryEntry.objects.filter(type="WORKFLOW_MIGRATED").values_list("actor_kind", "actor_id").distinct()
    ) == {("SERVICE", "operator")}


def test_a_batch_that_dies_half_way_is_taken_again_and_no_run_moves_twice(parked: list[str], monkeypatch: Any) -> None:
    """The story: a worker was killed while its batch had written the runs' moves but not yet
    committed. The transaction rolls back as a whole, so the batch's runs are as they were and
    their items still SELECTED; the task that takes the record over applies them once."""
    record_id = preview()
    operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    original = migration_apply._record_batch
    calls = {"n": 0}

    class WorkerKilled(BaseException):
        pass

    def dies_in_the_second_batch(rec: Any, batch: Any, actor: Any) -> Any:
        outcomes = original(rec, batch, actor)  # the runs' writes are made...
        calls["n"] += 1
        if calls["n"] == 2:
            raise WorkerKilled  # ...and the worker dies before the batch commits
        return outcomes

    monkeypatch.setattr(migration_apply, "_record_batch", dies_in_the_second_batch)
    with pytest.raises(WorkerKilled):
        background.run(record_id=record_id, budget_seconds=30)
    monkeypatch.setattr(migration_apply, "_record_batch", original)

    moved = migrated(parked)
    assert sorted(moved.values()) == [0, 0, 0, 0, 1, 1, 1]  # the first batch only
    assert items(record_id) == Counter({"MOVED": 3, "SELECTED": 4})
    assert Run.objects.filter(pk__in=parked, version=1, current_step="review").count() == 4

    # a killed worker does not release its lease: simulate that, then let it lapse
    MigrationRecord.objects.filter(pk=record_id).update(lease_token="dead-worker")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE workflow_migration_records SET lease_until = clock_timestamp() + interval '1 hour' WHERE id = %s",
            [record_id],
        )
    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "held"
    assert record_id not in operations.migration_due_background()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE workflow_migration_records SET lease_until = clock_timestamp() - interval '1 second' WHERE id = %s",
            [record_id],
        )
    assert operations.migration_due_background() == [record_id]

    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "done"
    assert migrated(parked) == Counter(dict.fromkeys(parked, 1))  # each run once, none skipped
    assert items(record_id) == Counter({"MOVED": RUNS})
    assert MigrationRecord.objects.get(pk=record_id).status == "DONE"


def test_the_sweep_sends_a_task_for_a_record_whose_lease_lapsed(parked: list[str], monkeypatch: Any) -> None:
    record_id = preview()
    operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    sent: list[int] = []
    monkeypatch.setattr(tasks, "_publish_migrations", lambda ids: sent.extend(ids))
    tasks.sweep()
    assert sent == []  # the press's own message is still on its way (one lease time)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE workflow_migration_records SET lease_until = clock_timestamp() - interval '1 second' WHERE id = %s",
            [record_id],
        )
    tasks.sweep()
    assert sent == [record_id]
    tasks.sweep()
    assert sent == [record_id]  # its message is queued (leased): the next sweeps send no second one
    # the task the sweep sent applies the record; a finished record is not sent again
    assert tasks.migration_apply(record_id) == "done"
    sent.clear()
    tasks.sweep()
    assert sent == []


def test_a_repeated_message_finds_the_record_held_and_changes_nothing(parked: list[str]) -> None:
    record_id = preview()
    operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    results: list[str] = []
    start = threading.Barrier(2)

    def deliver() -> None:
        try:
            start.wait(timeout=10)
            results.append(operations.migration_run_background(record_id=record_id, budget_seconds=30))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a delivery hung"
    assert sorted(results) == ["done", "held"]
    assert migrated(parked) == Counter(dict.fromkeys(parked, 1))
    # and once more, after the end
    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "held"
    assert migrated(parked) == Counter(dict.fromkeys(parked, 1))


def test_pause_stops_after_the_batch_and_resume_goes_on(parked: list[str]) -> None:
    record_id = preview()
    operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    # one batch, then the task's time is up
    assert background.run(record_id=record_id, budget_seconds=0) == "more"
    assert items(record_id) == Counter({"MOVED": 3, "SELECTED": 4})

    state = operations.migration_pause(record_id=record_id, actor=operations_actor())
    assert state.status == "PAUSED" and MigrationRecord.objects.get(pk=record_id).paused_by == "operator"
    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "held"
    with pytest.raises(MigrationIllegalState):  # neither a press nor a task applies a paused record
        operations.migration_apply(record_id=record_id, actor=operations_actor())
    with pytest.raises(MigrationIllegalState):
        operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    with pytest.raises(MigrationIllegalState):
        operations.migration_pause(record_id=record_id, actor=operations_actor())
    assert operations.migration_due_background() == []  # the sweep leaves a paused record alone
    assert items(record_id) == Counter({"MOVED": 3, "SELECTED": 4})

    state = operations.migration_resume(record_id=record_id, actor=operations_actor())
    assert state.status == "APPLYING"
    with pytest.raises(MigrationIllegalState):
        operations.migration_resume(record_id=record_id, actor=operations_actor())
    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "done"
    assert migrated(parked) == Counter(dict.fromkeys(parked, 1))


def test_a_pause_between_two_batches_of_a_running_task_stops_it(parked: list[str], monkeypatch: Any) -> None:
    record_id = preview()
    operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    original = migration_apply.apply_batch
    calls = {"n": 0}

    def pause_after_first(**kwargs: Any) -> Any:
        state = original(**kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            operations.migration_pause(record_id=record_id, actor=operations_actor())
        return state

    monkeypatch.setattr(background, "apply_batch", pause_after_first)
    assert background.run(record_id=record_id, budget_seconds=30) == "stopped"
    assert items(record_id) == Counter({"MOVED": 3, "SELECTED": 4})
    assert MigrationRecord.objects.get(pk=record_id).status == "PAUSED"


def test_close_needs_a_reason_and_leaves_the_rest_not_applied(parked: list[str]) -> None:
    record_id = preview()
    operations.migration_apply_background(record_id=record_id, actor=operations_actor())
    background.run(record_id=record_id, budget_seconds=0)  # one batch
    with pytest.raises(InvalidPayload) as refused:
        operations.migration_close(record_id=record_id, reason="  \n ", actor=operations_actor())
    assert [v.pointer for v in refused.value.violations] == ["/reason"]
    assert MigrationRecord.objects.get(pk=record_id).status == "APPLYING"  # nothing changed

    state = operations.migration_close(record_id=record_id, reason="wrong target node", actor=operations_actor())
    assert state.status == "CLOSED"
    record = MigrationRecord.objects.get(pk=record_id)
    assert (record.closed_by, record.close_reason) == ("operator", "wrong target node")
    assert record.finished_at is not None
    assert items(record_id) == Counter({"MOVED": 3, "NOT_APPLIED": 4})
    assert set(
        MigrationItem.objects.filter(record_id=record_id, status="NOT_APPLIED").values_list("detail", flat=True)
    ) == {"CLOSED"}
    # the runs not applied stay where they were
    assert Run.objects.filter(pk__in=parked, version=1, current_step="review").count() == 4
    assert operations.migration_run_background(record_id=record_id, budget_seconds=30) == "held"
    for refused_call in (operations.migration_pause, operations.migration_resume):
        with pytest.raises(MigrationIllegalState):
            refused_call(record_id=record_id, actor=operations_actor())
    with pytest.raises(MigrationIllegalState):
        operations.migration_close(record_id=record_id, reason="again", actor=operations_actor())
    with pytest.raises(MigrationIllegalState):
        operations.migration_apply(record_id=record_id, actor=operations_actor())
    # a closed record no longer holds its runs: they can be frozen into a new migration
    again = preview()
    assert MigrationRecord.objects.get(pk=again).total == 4


def test_a_run_in_an_open_migration_cannot_be_frozen_into_another(parked: list[str]) -> None:
    first = preview(parked[:2])
    # previewed (not applied yet) is open: the same runs are refused, and nothing is written
    with pytest.raises(RunsInOpenMigration) as refused:
        preview("all")
    assert refused.value.code == "RUNS_IN_OPEN_MIGRATION" and refused.value.record_id == first
    assert refused.value.runs == 2 and "2 of the selected runs are already in migration" in str(refused.value)
    assert MigrationRecord.objects.count() == 1
    # other runs of the position are free
    second = preview(parked[2:4])
    # being applied (or paused) is open too
    operations.migration_apply_background(record_id=first, actor=operations_actor())
    with pytest.raises(RunsInOpenMigration):
        preview(parked[:1])
    operations.migration_pause(record_id=first, actor=operations_actor())
    with pytest.raises(RunsInOpenMigration):
        preview(parked[1:2])
    # a discarded preview releases its runs; so does the dialog's next preview that replaces it
    assert operations.migration_discard(record_id=second)
    third = preview(parked[2:5])
    fourth = preview(parked[2:6], replaces=third)
    assert MigrationRecord.objects.get(pk=third).status == "DISCARDED"
    assert MigrationItem.objects.filter(record_id=fourth).count() == 4
    assert set(MigrationItem.objects.filter(record_id=third).values_list("status", flat=True)) == {"NOT_APPLIED"}


def test_the_database_refuses_a_second_open_item_for_a_run(parked: list[str]) -> None:
    """Two freezes at the same moment both pass the check; the partial unique index keeps the
    second from taking a run the first holds (its insert skips the run)."""
    from django.db import IntegrityError, transaction

    first = preview(parked[:1])
    other = MigrationRecord.objects.create(
        scope="default", definition_id="bulk-move", source_version=1, target_version=2, target_scope="default"
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        MigrationItem.objects.create(
            record=other, run_id=parked[0], row=0, source_node="review", kind="TASK", action="move", status="SELECTED"
        )
    assert MigrationItem.objects.filter(run_id=parked[0]).values_list("record_id", flat=True).get() == first
