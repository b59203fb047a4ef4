"""The hot path's shape (fewer round trips) must not change what anyone observes.

- A segment's first attempt takes no savepoints; a failure inside one redoes the segment with
  them: a completion or a signal whose application fails deterministically is still rejected
  with nothing of its application kept (the task open again, the wait still open, the state
  unchanged), exactly as with a savepoint from the start.
- A segment's settlement, history, run row and commit travel together; the claim fence still
  decides whether anything is kept.
- A recording that opened its own transaction sends the commit with its last statement; in a
  caller's transaction it commits nothing, and a caller's rollback takes it back.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from workflows import operations
from workflows.engine import waits
from workflows.models import Command, HistoryEntry, Park, Run, Task

pytestmark = pytest.mark.services

REVIEW = """
definitionId: optimistic-review
definitionVersion: 1
contract: {name: optimistic.v1, signals: {}}
stateSchema: {type: object}
initialState: "{'number': 'A-1'}"
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review"
    assignment: {mode: group, value: approvers}
    decisions:
      - name: broken
        set: "{'x': state.nothing.deeper}"
        next: done
      - name: approve
        set: "{'approved': true}"
        next: done
  - id: done
    type: complete
"""

PAYMENT = """
definitionId: optimistic-payment
definitionVersion: 1
contract:
  name: optimistic-payment.v1
  signals:
    paid: {type: object, properties: {amount: {type: number}}, required: [amount]}
stateSchema: {type: object}
initialState: "{'paid': 0.0}"
initialStep: wait-payment
steps:
  - id: wait-payment
    type: wait-signal
    signal: paid
    set: "{'paid': payload.nothing.deeper}"
    next: done
  - id: done
    type: complete
"""


def savepoints(captured: CaptureQueriesContext) -> int:
    return sum(1 for q in captured.captured_queries if q["sql"].lstrip().upper().startswith("SAVEPOINT"))


def history_types(run_id: Any) -> list[str]:
    return list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))


@pytest.mark.django_db(transaction=True)
class TestOptimisticSegments:
    def _waiting_task(self, deploy: Any, drain: Any) -> tuple[Any, Task]:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        drain(recorded.run_id)
        task = Task.objects.get(run_id=recorded.run_id)
        assert task.status == "OPEN"
        return recorded.run_id, task

    def test_a_completion_that_succeeds_takes_no_savepoint(self, deploy: Any, drain: Any) -> None:
        run_id, task = self._waiting_task(deploy, drain)
        operations.complete_task(task_id=task.id, decision="approve")
        with CaptureQueriesContext(connection) as captured:
            drain(run_id)
        run = Run.objects.get(id=run_id)
        assert run.status == "COMPLETED" and run.state.get("approved") is True
        assert savepoints(captured) == 0

    def test_a_completion_that_fails_is_rejected_with_nothing_of_it_kept(self, deploy: Any, drain: Any) -> None:
        run_id, task = self._waiting_task(deploy, drain)
        before = Run.objects.get(id=run_id)
        operations.complete_task(task_id=task.id, decision="broken")
        with CaptureQueriesContext(connection) as captured:
            drain(run_id)
        assert savepoints(captured) >= 1  # the redo took the savepoint
        completion = Command.objects.get(run_id=run_id, kind="COMPLETION")
        assert completion.status == "REJECTED" and completion.last_error.startswith("DETERMINISTIC_FAILURE")
        task.refresh_from_db()
        assert task.status == "OPEN" and task.decision in ("", None)
        assert Park.objects.filter(run_id=run_id, left_at__isnull=True).count() == 1  # still waiting there
        run = Run.objects.get(id=run_id)
        assert run.status == "WAITING" and run.state == before.state and run.state_version == before.state_version
        types = history_types(run_id)
        assert types.count("COMMAND_RECEIVED") == 2  # the start's and the completion's, once each
        assert "COMMAND_REJECTED" in types and "TASK_COMPLETED" not in types
        # the task is still decidable
        operations.complete_task(task_id=task.id, decision="approve")
        drain(run_id)
        assert Run.objects.get(id=run_id).status == "COMPLETED"

    def test_a_signal_that_fails_is_rejected_and_the_run_keeps_waiting(self, deploy: Any, drain: Any) -> None:
        deploy(PAYMENT)
        recorded = operations.start(definition_id="optimistic-payment", payload={})
        drain(recorded.run_id)
        operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 5})
        drain(recorded.run_id)
        signal = Command.objects.get(run_id=recorded.run_id, kind="SIGNAL")
        assert signal.status == "REJECTED"
        run = Run.objects.get(id=recorded.run_id)
        assert run.status == "WAITING" and run.state == {"paid": 0.0} and run.open_signals == 0
        types = history_types(recorded.run_id)
        assert "COMMAND_REJECTED" in types and "SIGNAL_RECEIVED" not in types


@pytest.mark.django_db(transaction=True)
class TestSegmentEnd:
    """The settlement, history, run row and commit travel together; the settlement's fence
    still decides whether anything of the segment is kept."""

    def test_a_segment_whose_claim_was_taken_back_commits_nothing(self, deploy: Any, monkeypatch: Any) -> None:
        import time

        import psycopg
        from django.conf import settings

        from workflows.engine import executor, faults, segment

        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        claimed = executor.claim_run_head(recorded.run_id)
        assert not isinstance(claimed, str)
        head, token = claimed
        db = settings.DATABASES["default"]
        other = psycopg.connect(
            host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
        )
        original = faults.point

        def lease_recovered_meanwhile(name: str) -> None:
            # the lease lapsed and recovery put the command back: our settlement finds no claim
            if name == "before_settle":
                other.execute(
                    "UPDATE workflow_commands SET status = 'PENDING', token = NULL, lease_until = NULL WHERE id = %s",
                    [head.id],
                )
            original(name)

        monkeypatch.setattr(faults, "point", lease_recovered_meanwhile)
        try:
            with pytest.raises(segment.Fenced):
                segment.run(
                    command_id=head.id,
                    run_id=head.run_id,
                    token=token,
                    plan=executor._plan_for(head),
                    executor_id="test",
                    deadline=time.monotonic() + 20,
                    max_steps=100,
                    kind=head.kind,
                )
        finally:
            other.close()
        run = Run.objects.get(id=recorded.run_id)
        assert run.status == "PENDING" and run.history_seq == 0  # nothing of the segment was kept
        assert HistoryEntry.objects.filter(run_id=recorded.run_id).count() == 0
        assert not Task.objects.filter(run_id=recorded.run_id).exists()
        assert Command.objects.get(id=head.id).status == "PENDING"


@pytest.mark.django_db(transaction=True)
class TestRecordingCommit:
    def _other_connection(self) -> Any:
        import psycopg
        from django.conf import settings

        db = settings.DATABASES["default"]
        return psycopg.connect(
            host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
        )

    def test_recordings_of_their_own_are_committed_and_then_wake_the_run(self, deploy: Any, drain: Any) -> None:
        from workflows.engine import wakeups

        deploy(REVIEW)
        other = self._other_connection()
        seen: list[tuple[str, int]] = []

        def notifier(items: list[Any]) -> None:  # runs after the commit: another session sees the rows
            for run_id, _ in items:
                row = other.execute(
                    "SELECT count(*) FROM workflow_commands WHERE run_id = %s AND status = 'PENDING'", [run_id]
                ).fetchone()
                seen.append((str(run_id), row[0] if row else 0))

        previous = (wakeups._notifier, wakeups._intent_notifier)
        wakeups.set_notifier(notifier, None)
        try:
            recorded = operations.start(definition_id="optimistic-review", payload={})
            assert seen == [(str(recorded.run_id), 1)]  # the START, committed before the wake-up
            drain(recorded.run_id)
            task = Task.objects.get(run_id=recorded.run_id)
            seen.clear()
            completion = operations.complete_task(task_id=task.id, decision="approve")
            assert seen == [(str(recorded.run_id), 1)]  # the COMPLETION
        finally:
            wakeups.set_notifier(*previous)
            other.close()
        task.refresh_from_db()
        assert task.status == "COMPLETING" and task.reservation_owner == completion.command_id

    def test_recordings_in_a_callers_transaction_roll_back_with_it(self, deploy: Any, drain: Any) -> None:
        from django.db import transaction

        deploy(REVIEW)
        with pytest.raises(RuntimeError), transaction.atomic():
            operations.start(definition_id="optimistic-review", payload={}, business_key="rolled-back")
            raise RuntimeError("the caller fails after the start")
        assert not Run.objects.filter(business_key="rolled-back").exists()
        recorded = operations.start(definition_id="optimistic-review", payload={})
        drain(recorded.run_id)
        task = Task.objects.get(run_id=recorded.run_id)
        with pytest.raises(RuntimeError), transaction.atomic():
            operations.complete_task(task_id=task.id, decision="approve")
            raise RuntimeError("the caller fails after the completion")
        task.refresh_from_db()
        assert task.status == "OPEN" and not Command.objects.filter(run_id=recorded.run_id, kind="COMPLETION").exists()

    def test_a_start_in_a_transaction_the_caller_manages_by_hand_is_not_committed(self, deploy: Any) -> None:
        from django.db import transaction

        deploy(REVIEW)
        transaction.set_autocommit(False)
        try:
            operations.start(definition_id="optimistic-review", payload={}, business_key="by-hand")
            transaction.rollback()
        finally:
            transaction.set_autocommit(True)
        assert not Run.objects.filter(business_key="by-hand").exists()


@pytest.mark.django_db(transaction=True)
class TestRoundTrips:
    """psycopg answers a transaction's BEGIN in pipeline mode, and a commit in a pipeline,
    with a Sync of their own (a round trip with nothing else in it); the engine sends both
    with the statements around them. Each pipeline then ends with one Sync: one round trip."""

    @pytest.fixture
    def syncs(self, monkeypatch: Any) -> list[int]:
        from psycopg import _pipeline_base

        counted = [0]
        original = _pipeline_base.BasePipeline._enqueue_sync

        def counting(self: Any) -> None:
            counted[0] += 1
            original(self)

        monkeypatch.setattr(_pipeline_base.BasePipeline, "_enqueue_sync", counting)
        return counted

    def _committed(self, sql: str, params: list[Any]) -> Any:
        other = TestRecordingCommit()._other_connection()
        try:
            return other.execute(sql, params).fetchone()
        finally:
            other.close()

    def test_a_transaction_of_two_pipelines_takes_two_round_trips_and_commits(self, syncs: list[int]) -> None:
        from django.db import transaction

        from workflows.engine import db, pipeline

        with transaction.atomic():
            db.fetchone("SELECT 1", prepared=True)  # BEGIN travels with it
            assert syncs[0] == 1 and connection.connection.info.transaction_status.name == "INTRANS"
            row = pipeline.fetchone_and_commit(
                "INSERT INTO workflow_dedup (kind, scope, key, fingerprint, created_at)"
                " VALUES ('test', %s, %s, '', now()) RETURNING key",
                ["round-trips", "k1"],
            )
            assert row == ("k1",)
            assert syncs[0] == 2  # the INSERT and its COMMIT: one round trip
            assert connection.connection.info.transaction_status.name == "IDLE"
        assert self._committed("SELECT key FROM workflow_dedup WHERE scope = %s", ["round-trips"]) == ("k1",)

    def test_a_start_and_a_completion_each_take_two_round_trips(
        self, deploy: Any, drain: Any, syncs: list[int]
    ) -> None:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        assert syncs[0] == 2  # the selection read with BEGIN; the run and its START with COMMIT
        drain(recorded.run_id)
        task = Task.objects.get(run_id=recorded.run_id)
        syncs[0] = 0
        with CaptureQueriesContext(connection) as captured:
            operations.complete_task(task_id=task.id, decision="approve")
        # the task read with BEGIN; the lock and the task; the command and reservation with COMMIT
        # nothing outside the pipelines (Django logs its BEGIN/COMMIT markers; psycopg sent them)
        others = [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
        assert syncs[0] == 3 and others == []
        assert self._committed("SELECT status FROM workflow_tasks WHERE id = %s", [task.id]) == ("COMPLETING",)

    def test_a_deferred_write_travels_with_the_next_statement(self, syncs: list[int]) -> None:
        from django.db import transaction

        from workflows.engine import db, pipeline

        insert = (
            "INSERT INTO workflow_dedup (kind, scope, key, fingerprint, created_at)"
            " VALUES ('test', 'deferred', %s, '', now()) RETURNING key"
        )
        answers: list[Any] = []
        with transaction.atomic(), pipeline.deferring():
            db.fetchone("SELECT 1", prepared=True)
            syncs[0] = 0
            pipeline.defer(insert, ["k1"], answers.append)
            pipeline.defer(insert, ["k2"], answers.append)
            assert answers == [] and syncs[0] == 0  # nothing sent yet
            rows = pipeline.fetch_batch([("SELECT count(*) FROM workflow_dedup WHERE scope = 'deferred'", [])])
            assert syncs[0] == 1 and rows == [(2,)]  # both went first, in the same round trip
            assert answers == [("k1",), ("k2",)]
            pipeline.defer(insert, ["k3"], answers.append)
            with connection.cursor() as cur:  # any query through Django's cursors sends them first
                cur.execute("SELECT count(*) FROM workflow_dedup WHERE scope = 'deferred'")
                assert cur.fetchone() == (3,)
            assert answers[-1] == ("k3",)
            pipeline.defer(insert, ["k4"], answers.append)  # never sent: the block ends first
        assert self._committed("SELECT count(*) FROM workflow_dedup WHERE scope = %s", ["deferred"]) == (3,)
        pipeline.defer(insert, ["k5"], answers.append)  # outside ``deferring``: sent at once
        assert answers[-1] == ("k5",)

    def test_a_service_intent_and_the_human_task_travel_with_the_settlement(
        self, deploy: Any, drain: Any, syncs: list[int], drawn_park_ids: None
    ) -> None:
        deploy(SERVICE_THEN_REVIEW)
        recorded = operations.start(definition_id="service-then-review", payload={})
        syncs[0] = 0
        drain(recorded.run_id)
        # the lock and fence; the intent, the park, the task and its notice with the settlement
        assert syncs[0] == 2
        types = history_types(recorded.run_id)
        assert types.index("SERVICE_DISPATCHED") < types.index("TASK_CREATED")
        intent = self._committed(
            "SELECT kind, target FROM workflow_outbox WHERE run_id = %s AND kind = 'SERVICE'", [recorded.run_id]
        )
        assert intent == ("SERVICE", "test.noop")
        assert Task.objects.get(run_id=recorded.run_id).status == "OPEN"

    def test_the_first_task_of_a_process_draws_park_ids_for_the_next(
        self, deploy: Any, drain: Any, syncs: list[int]
    ) -> None:
        deploy(REVIEW)
        waits._drawn["ids"].clear()  # a process that has drawn none yet
        first = operations.start(definition_id="optimistic-review", payload={})
        second = operations.start(definition_id="optimistic-review", payload={})
        syncs[0] = 0
        drain(first.run_id)
        # the lock and fence; the park, the task, its notice and a block of park ids; the settlement
        assert syncs[0] == 3
        assert len(waits._drawn["ids"]) == waits.PARK_IDS_PER_DRAW
        drawn = list(waits._drawn["ids"])
        syncs[0] = 0
        drain(second.run_id)
        assert syncs[0] == 2  # the park, the task and its notice went with the settlement
        for recorded in (first, second):
            run = Run.objects.get(id=recorded.run_id)
            park = Park.objects.get(run_id=recorded.run_id)
            assert run.status == "WAITING" and run.wait["park"] == park.id and park.left_at is None
            assert Task.objects.get(run_id=recorded.run_id).status == "OPEN"
        assert Park.objects.get(run_id=second.run_id).id == drawn[0]
        assert history_types(second.run_id) == history_types(first.run_id)

    def test_a_task_with_a_due_date_keeps_its_round_trip_for_its_timer(
        self, deploy: Any, drain: Any, syncs: list[int], drawn_park_ids: None
    ) -> None:
        deploy(REVIEW_WITH_DUE_DATE)
        recorded = operations.start(definition_id="review-due", payload={})
        before = len(waits._drawn["ids"])
        syncs[0] = 0
        drain(recorded.run_id)
        # the lock and fence; the park, the task, its due date's timer and notice; the settlement
        assert syncs[0] == 3
        assert len(waits._drawn["ids"]) == before  # no drawn id taken
        run = Run.objects.get(id=recorded.run_id)
        due = Command.objects.get(run_id=recorded.run_id, kind="TIMER", status="PENDING")
        assert run.wait["park"] == Park.objects.get(run_id=recorded.run_id).id
        assert run.wait["timers"] == [due.timer_id]

    def test_park_ids_drawn_ahead_serve_only_their_process_and_database(
        self, monkeypatch: Any, drawn_park_ids: None
    ) -> None:
        assert waits.draw_statement() is None and waits._drawn["ids"]
        with monkeypatch.context() as forked:
            forked.setattr(waits.os, "getpid", lambda: -1)
            assert waits.drawn_park_id() is None and waits.draw_statement() is not None
        with monkeypatch.context() as elsewhere:
            elsewhere.setitem(connection.settings_dict, "NAME", "another_database")
            assert waits.drawn_park_id() is None and waits.draw_statement() is not None
        first, second = waits.drawn_park_id(), waits.drawn_park_id()
        assert first is not None and second is not None and first != second  # each id once

    def test_a_decision_that_ends_the_run_takes_two_round_trips(
        self, deploy: Any, drain: Any, syncs: list[int]
    ) -> None:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        drain(recorded.run_id)
        task = Task.objects.get(run_id=recorded.run_id)
        operations.complete_task(task_id=task.id, decision="approve")
        syncs[0] = 0
        drain(recorded.run_id)
        # the lock, the fence, the task and what else the run holds; the park and the task
        # closed with the settlement, the history, the run row and COMMIT
        assert syncs[0] == 2
        run = self._committed("SELECT status, state->>'approved' FROM workflow_runs WHERE id = %s", [recorded.run_id])
        assert run == ("COMPLETED", "true")
        assert self._committed("SELECT status, decision FROM workflow_tasks WHERE id = %s", [task.id]) == (
            "COMPLETED",
            "approve",
        )
        open_parks = self._committed(
            "SELECT count(*) FROM workflow_parks WHERE run_id = %s AND left_at IS NULL", [recorded.run_id]
        )
        assert open_parks == (0,)
        types = history_types(recorded.run_id)
        assert types.index("TASK_COMPLETED") < types.index("WORKFLOW_COMPLETED")

    def test_a_decision_that_ends_the_run_tears_down_what_else_it_holds(self, deploy: Any, drain: Any) -> None:
        """What the run holds besides the decided task and its wait's park is read with the
        lock: another open park of the run is still closed when the decision ends it."""
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        drain(recorded.run_id)
        task = Task.objects.get(run_id=recorded.run_id)
        with connection.cursor() as cur:  # a park the run holds besides its wait's (as a branch's would be)
            cur.execute(
                "INSERT INTO workflow_parks (run_id, definition_id, scope, version, node, kind, branch_id, since, "
                "left_how, moved_to_version, moved_to_scope, moved_to_node, moved_by) "
                "SELECT id, definition_id, scope, version, 'elsewhere', 'SIGNAL', 'b1', now(), '', NULL, '', '', '' "
                "FROM workflow_runs WHERE id = %s",
                [recorded.run_id],
            )
        operations.complete_task(task_id=task.id, decision="approve")
        drain(recorded.run_id)
        assert self._committed("SELECT status FROM workflow_runs WHERE id = %s", [recorded.run_id]) == ("COMPLETED",)
        open_parks = self._committed(
            "SELECT count(*) FROM workflow_parks WHERE run_id = %s AND left_at IS NULL", [recorded.run_id]
        )
        assert open_parks == (0,)


REVIEW_WITH_DUE_DATE = """
definitionId: review-due
definitionVersion: 1
contract: {name: review-due.v1, signals: {}}
stateSchema: {type: object}
initialState: "{'number': 'A-1'}"
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review"
    assignment: {mode: group, value: approvers}
    due: {after: P2D, next: expired}
    decisions:
      - name: approve
        next: done
  - {id: expired, type: complete}
  - {id: done, type: complete}
"""


SERVICE_THEN_REVIEW = """
definitionId: service-then-review
definitionVersion: 1
contract: {name: service-then-review.v1, signals: {}}
stateSchema: {type: object}
initialState: "{'number': 'A-1'}"
initialStep: reserve
steps:
  - id: reserve
    type: service
    target: test.noop
    next: review
  - id: review
    type: human-task
    title: "Review"
    assignment: {mode: group, value: approvers}
    decisions:
      - name: approve
        next: done
  - id: done
    type: complete
"""


def test_a_failure_surfacing_as_pipeline_aborted_keeps_its_sqlstate() -> None:
    """psycopg can raise "pipeline aborted" for a later result while a statement's failure is
    being raised; the failure's kind (here a lock timeout: transient) is still what counts."""
    from psycopg import errors

    from workflows.engine import db

    masked: Exception | None = None
    try:
        try:
            raise errors.LockNotAvailable("lock timeout")
        except errors.LockNotAvailable:
            raise errors.PipelineAborted("pipeline aborted")  # as psycopg's pipeline exit does
    except errors.PipelineAborted as exc:
        masked = exc
    assert masked is not None
    assert db.sqlstate(masked) == "55P03" and db.is_transient(masked)
