"""A wake-up's claim travels with its segment's first statements (one round trip for both).

The claim is still a transaction of its own, committed before the segment's work: a worker
that dies or fails between the two leaves the attempt spent and the run untouched; a claim
that finds nothing leaves no lock behind and spends nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import OperationalError

from tests.engine.test_hot_path_shape import REVIEW
from workflows import operations
from workflows.engine import executor, faults
from workflows.models import Command, HistoryEntry, Park, Run, Task

pytestmark = pytest.mark.services


def other_connection() -> psycopg.Connection[Any]:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
    )


def lock_is_free(run_id: Any) -> bool:
    """Another session can take the run's execution lock without waiting."""
    with other_connection() as other:
        try:
            with other.transaction():
                other.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE NOWAIT", [run_id])
        except psycopg.errors.LockNotAvailable:
            return False
    return True


@pytest.fixture
def round_trips(monkeypatch: Any) -> list[int]:
    """What the client waits for: each pipeline's Sync, each statement sent outside a pipeline,
    each COMMIT or ROLLBACK sent on its own."""
    from psycopg import _pipeline_base

    counted = [0]
    enqueue_sync = _pipeline_base.BasePipeline._enqueue_sync
    execute = psycopg.Cursor.execute
    commit, rollback = psycopg.Connection.commit, psycopg.Connection.rollback

    def counting_sync(self: Any) -> None:
        counted[0] += 1
        enqueue_sync(self)

    def counting_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.connection._pipeline is None:
            counted[0] += 1
        return execute(self, *args, **kwargs)

    def counting(original: Any) -> Any:
        def ending(self: Any) -> None:
            if self.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                counted[0] += 1
            original(self)

        return ending

    monkeypatch.setattr(_pipeline_base.BasePipeline, "_enqueue_sync", counting_sync)
    monkeypatch.setattr(psycopg.Cursor, "execute", counting_execute)
    monkeypatch.setattr(psycopg.Connection, "commit", counting(commit))
    monkeypatch.setattr(psycopg.Connection, "rollback", counting(rollback))
    return counted


@pytest.mark.django_db(transaction=True)
class TestClaimWithSegment:
    def test_a_wake_up_runs_the_start_in_two_round_trips_and_the_completion_in_two(
        self, deploy: Any, round_trips: list[int], drawn_park_ids: None
    ) -> None:
        deploy(REVIEW)
        warm = operations.start(definition_id="optimistic-review", payload={})
        executor.drain_run(warm.run_id)  # this process has the plan (and park ids drawn ahead) from here on
        recorded = operations.start(definition_id="optimistic-review", payload={})
        executor.recover_expired_runs()  # the drain's own look for lapsed leases is not due now
        round_trips[0] = 0
        assert executor.drain_run(recorded.run_id) == 1
        # the claim with the lock and the fence; the task, its park and notice with the settlement
        assert round_trips[0] == 2
        task = Task.objects.get(run_id=recorded.run_id)
        assert task.status == "OPEN"
        run = Run.objects.get(id=recorded.run_id)
        park = Park.objects.get(run_id=recorded.run_id)
        assert run.status == "WAITING" and run.wait["park"] == park.id and park.left_at is None
        operations.complete_task(task_id=task.id, decision="approve")
        executor.recover_expired_runs()
        round_trips[0] = 0
        assert executor.drain_run(recorded.run_id) == 1
        # the claim with the lock, the task and what else the run holds; the settlement
        assert round_trips[0] == 2
        run = Run.objects.get(id=recorded.run_id)
        assert run.status == "COMPLETED" and run.state.get("approved") is True
        commands = Command.objects.filter(run_id=recorded.run_id).order_by("seq")
        assert [(c.kind, c.status, c.attempts) for c in commands] == [
            ("START", "COMPLETE", 1),
            ("COMPLETION", "COMPLETE", 1),
        ]
        assert lock_is_free(recorded.run_id)

    def test_a_failure_between_the_claim_and_the_segment_leaves_the_attempt_spent(self, deploy: Any) -> None:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        faults.configure("after_claim:raise:#1")
        try:
            with pytest.raises(OperationalError):
                executor.drain_run(recorded.run_id)
        finally:
            faults.configure("")
        start = Command.objects.get(run_id=recorded.run_id, kind="START")
        # the claim was committed on its own: the attempt is spent, the lease runs
        assert start.status == "CLAIMED" and start.attempts == 1 and start.lease_until is not None
        run = Run.objects.get(id=recorded.run_id)
        assert run.status == "PENDING" and run.history_seq == 0  # nothing of the segment was kept
        assert not HistoryEntry.objects.filter(run_id=recorded.run_id).exists()
        assert not Task.objects.filter(run_id=recorded.run_id).exists()
        assert lock_is_free(recorded.run_id)

    def test_a_busy_run_spends_nothing_and_keeps_its_command(self, deploy: Any) -> None:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        with other_connection() as other, other.transaction():
            other.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE", [recorded.run_id])
            assert executor.drain_run(recorded.run_id) == 0
        start = Command.objects.get(run_id=recorded.run_id, kind="START")
        assert start.status == "PENDING" and start.attempts == 0 and start.token is None
        assert executor.drain_run(recorded.run_id) == 1  # once the lock is free
        assert Task.objects.get(run_id=recorded.run_id).status == "OPEN"

    def test_a_wake_up_with_nothing_to_run_leaves_no_lock_behind(self, deploy: Any) -> None:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        assert executor.drain_run(recorded.run_id) == 1
        assert executor.drain_run(recorded.run_id) == 0  # a repeated wake-up: the run waits for its task
        assert lock_is_free(recorded.run_id)
        run = Run.objects.get(id=recorded.run_id)
        assert run.status == "WAITING"
        assert Command.objects.get(run_id=recorded.run_id, kind="START").attempts == 1

    def test_a_head_this_node_cannot_plan_is_deferred_with_its_attempt_given_back(
        self, deploy: Any, monkeypatch: Any
    ) -> None:
        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        monkeypatch.setattr(executor, "_plan_for", lambda head: None)
        assert executor.drain_run(recorded.run_id) == 1
        start = Command.objects.get(run_id=recorded.run_id, kind="START")
        assert start.status == "DEFERRED" and start.attempts == 0 and start.deferral_count == 1
        assert lock_is_free(recorded.run_id)
        assert list(HistoryEntry.objects.filter(run_id=recorded.run_id).values_list("type", flat=True)) == [
            "COMMAND_DEFERRED"
        ]

    def test_a_run_locked_between_the_claim_and_the_segment_is_retried_with_its_plan_looked_up_after(
        self, deploy: Any, monkeypatch: Any
    ) -> None:
        from django.db import transaction

        from workflows.definitions import cache
        from workflows.engine import locks

        deploy(REVIEW)
        recorded = operations.start(definition_id="optimistic-review", payload={})
        real = locks.claim_and_lock
        seen: list[str] = []

        def busy_after_the_claim(*args: Any, **kwargs: Any) -> locks.Claimed:
            found = real(*args, **kwargs)
            if not seen:  # as when a recording takes the run's lock right after the claim's commit
                seen.append("busy")
                transaction.set_rollback(True)
                return locks.Claimed(found.claim, None, None, None)
            return found

        monkeypatch.setattr(locks, "claim_and_lock", busy_after_the_claim)
        cache.plan_cache.clear()  # a worker that has not built this plan yet: a look-up in the database
        assert executor.drain_run(recorded.run_id) == 1
        assert seen == ["busy"]
        start = Command.objects.get(run_id=recorded.run_id, kind="START")
        assert start.status == "COMPLETE" and start.attempts == 1 and start.last_error == ""
        assert Run.objects.get(id=recorded.run_id).status == "WAITING"
        assert Task.objects.get(run_id=recorded.run_id).status == "OPEN"
