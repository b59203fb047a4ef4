"""Parked signals and the outcome table through a real Celery worker and beat (issue #26).

Branch addressing of parked signals, queue order when the drain overruns its budget, a
failed run's branch-addressed signals and completions, migration of a run holding parked
signals. Every command is run by the worker; the test only records and reads.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from tests.engine.test_e2e_worker_commands import TWO_WAITS
from tests.support.ops import make_due
from tests.support.waiting import eventually
from workflows import operations, queries
from workflows.exceptions import TaskNotWaiting
from workflows.models import Branch, Command, HistoryEntry, Run, Task

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def settle(run_id: Any, worker: Any) -> None:
    report = operations.await_idle(60, run_id=run_id)
    assert report.idle, worker.logs()


def command(command_id: int) -> Command:
    return Command.objects.get(pk=command_id)


def branch(run_id: Any, branch_id: str) -> Branch:
    return Branch.objects.get(run_id=run_id, branch_id=branch_id)


def open_task(run_id: Any, step: str) -> Task:
    return Task.objects.get(run_id=run_id, step=step, status="OPEN")


# Two branches, each an approval and then a wait for `go`; after the join the run waits for
# `go` once more at its own wait `final`.
BRANCH_SIGNALS = """
definitionId: branch-signals-{policy}
definitionVersion: 1
contract: {{name: branch-signals.v1, signals: {{go: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: split
steps:
  - {{id: split, type: fork, branches: [a, b], join: gather}}
  - id: a
    type: human-task
    title: A review
    assignment: {{mode: group, value: approvers}}
    decisions: [{{name: approve, next: a-wait}}]
  - {{id: a-wait, type: wait-signal, signal: go, set: "{{'a': 'go'}}", next: gather}}
  - id: b
    type: human-task
    title: B review
    assignment: {{mode: group, value: approvers}}
    decisions: [{{name: approve, next: b-wait}}]
  - {{id: b-wait, type: wait-signal, signal: go, set: "{{'b': 'go'}}", next: gather}}
  - {{id: gather, type: join, policy: {policy}, next: final}}
  - {{id: final, type: wait-signal, signal: go, set: "{{'final': 'go'}}", next: done}}
  - {{id: done, type: complete}}
"""


def test_a_parked_signal_addressed_to_one_branch_is_never_applied_in_its_sibling_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    # Issue #26 (engine 134): a `go` addressed to branch a, parked while a was at its
    # approval, was applied in branch b as soon as b reached its own `go` wait — and a then
    # waited for it forever.
    deploy(BRANCH_SIGNALS.format(policy="all"))
    run_id = operations.start(definition_id="branch-signals-all", payload={}).run_id
    settle(run_id, celery_worker_process)
    for_a = operations.signal(run_id=run_id, name="go", branch="a")
    settle(run_id, celery_worker_process)
    assert command(for_a.command_id).status == "PARKED"

    operations.complete_task(task_id=open_task(run_id, "b").id, decision="approve")
    settle(run_id, celery_worker_process)
    assert command(for_a.command_id).status == "PARKED", celery_worker_process.logs()
    assert (branch(run_id, "b").status, branch(run_id, "b").current_step) == ("WAITING", "b-wait")

    # a reaches its wait: the signal addressed to it applies there, and carries a to the join
    operations.complete_task(task_id=open_task(run_id, "a").id, decision="approve")
    settle(run_id, celery_worker_process)
    assert command(for_a.command_id).status == "COMPLETE"
    assert branch(run_id, "a").status == "COMPLETED", celery_worker_process.logs()
    applied = HistoryEntry.objects.get(run_id=run_id, type="SIGNAL_APPLIED")
    assert (applied.command_id, applied.branch_id) == (for_a.command_id, "a")
    assert branch(run_id, "b").status == "WAITING"

    operations.signal(run_id=run_id, name="go", branch="b")
    settle(run_id, celery_worker_process)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_step) == ("WAITING", "final")
    operations.signal(run_id=run_id, name="go")
    settle(run_id, celery_worker_process)
    run.refresh_from_db()
    assert run.status == "COMPLETED" and run.state == {"a": "go", "b": "go", "final": "go"}
    assert run.open_signals == 0


def test_a_parked_branch_signal_is_not_applied_at_the_runs_own_wait_after_the_join_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    # Issue #26 (engine 134, 152): with an `any` join, a `go` parked for branch b was applied
    # at the run's own `go` wait after the join had superseded b, and completed the run.
    deploy(BRANCH_SIGNALS.format(policy="any"))
    run_id = operations.start(definition_id="branch-signals-any", payload={}).run_id
    settle(run_id, celery_worker_process)
    for_b = operations.signal(run_id=run_id, name="go", branch="b")
    operations.complete_task(task_id=open_task(run_id, "a").id, decision="approve")
    settle(run_id, celery_worker_process)
    assert command(for_b.command_id).status == "PARKED"

    operations.signal(run_id=run_id, name="go", branch="a")  # a joins; b is superseded
    settle(run_id, celery_worker_process)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_step) == ("WAITING", "final"), celery_worker_process.logs()
    assert branch(run_id, "b").status == "SUPERSEDED"
    assert command(for_b.command_id).status == "PARKED"
    assert run.state == {"a": "go"} and run.open_signals == 1

    operations.signal(run_id=run_id, name="go")  # the run's own signal
    settle(run_id, celery_worker_process)
    run.refresh_from_db()
    assert run.status == "COMPLETED" and run.state == {"a": "go", "final": "go"}
    # the run ended: the branch's parked signal is settled with it, never applied
    assert command(for_b.command_id).status == "REJECTED" and run.open_signals == 0


# Waits for `first`, then for `go`: a `go` whose payload asks to spin runs into a decision
# that routes to itself until the step budget is spent (a deterministic overrun).
SPINNING = """
definitionId: spinning
definitionVersion: 1
contract: {name: spinning.v1, signals: {first: null, go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-first
steps:
  - {id: wait-first, type: wait-signal, signal: first, next: wait-go}
  - {id: wait-go, type: wait-signal, signal: go, set: "{'spin': payload.spin, 'last': payload.n}", next: spin}
  - id: spin
    type: decision
    routes: [{when: "state.spin", to: spin}]
    default: done
  - {id: done, type: complete}
"""


def test_a_parked_signal_that_overruns_the_budget_keeps_the_queue_order_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    # Issue #26 (engine 160): the first parked `go` overran the step budget in the drain and
    # went back to PENDING, but the drain went on and applied the second `go` first.
    deploy(SPINNING)
    run_id = operations.start(definition_id="spinning", payload={}).run_id
    settle(run_id, celery_worker_process)
    spinning = operations.signal(run_id=run_id, name="go", payload={"spin": True, "n": 1})
    plain = operations.signal(run_id=run_id, name="go", payload={"spin": False, "n": 2})
    settle(run_id, celery_worker_process)
    assert [command(c.command_id).status for c in (spinning, plain)] == ["PARKED", "PARKED"]

    operations.signal(run_id=run_id, name="first")
    settle(run_id, celery_worker_process)
    spun, applied = command(spinning.command_id), command(plain.command_id)
    # the first `go` ran as a segment of its own, in its place, and was rejected alone ...
    assert spun.status == "REJECTED" and spun.last_error.startswith("STEP_LIMIT"), celery_worker_process.logs()
    # ... before the second one was applied
    assert applied.status == "COMPLETE"
    run = Run.objects.get(pk=run_id)
    assert run.status == "COMPLETED" and run.state == {"spin": False, "last": 2}
    rejected_at = HistoryEntry.objects.get(run_id=run_id, command_id=spun.id, type="COMMAND_REJECTED").seq
    completed_at = HistoryEntry.objects.get(run_id=run_id, command_id=applied.id, type="COMMAND_COMPLETED").seq
    assert rejected_at < completed_at
    assert run.open_signals == 0


# A fork whose `clock` branch fails the run when its timer fires (its decision cannot be
# evaluated), while `quick` has joined and `review` still waits at its approval.
FAILING_FORK = """
definitionId: failing-fork
definitionVersion: 1
contract: {name: failing-fork.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: split
steps:
  - {id: split, type: fork, branches: [quick, review, clock], join: gather}
  - {id: quick, type: wait-signal, signal: go, next: gather}
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    decisions: [{name: approve, next: review-wait}]
  - {id: review-wait, type: wait-signal, signal: go, next: gather}
  - {id: clock, type: timer, after: PT1H, next: broken}
  - id: broken
    type: decision
    routes: [{when: "state.missing.deeper > 1", to: gather}]
    default: gather
  - {id: gather, type: join, policy: all, next: done}
  - {id: done, type: complete}
"""


def _failed_fork(worker: Any) -> Any:
    run_id = operations.start(definition_id="failing-fork", payload={}).run_id
    settle(run_id, worker)
    operations.signal(run_id=run_id, name="go", branch="quick")
    settle(run_id, worker)
    assert branch(run_id, "quick").status == "COMPLETED"
    make_due(run_id, "FIRE")
    eventually(
        lambda: Run.objects.get(pk=run_id).status == "FAILED",
        timeout=60,
        what="the run to fail at its timer",
        details=worker.logs,
    )
    settle(run_id, worker)
    return run_id


def test_a_failed_runs_branch_signal_is_stale_for_an_ended_branch_and_parked_for_a_live_one_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    # Issue #26 (engine 152): on a FAILED run a signal for a branch that had ended was parked
    # (holding an open-signal slot for good) instead of settled STALE.
    deploy(FAILING_FORK)
    run_id = _failed_fork(celery_worker_process)
    ended = operations.signal(run_id=run_id, name="go", branch="quick")
    live = operations.signal(run_id=run_id, name="go", branch="review")
    settle(run_id, celery_worker_process)

    stale = command(ended.command_id)
    assert stale.status == "STALE" and stale.last_error.startswith("BRANCH_ENDED"), celery_worker_process.logs()
    assert HistoryEntry.objects.get(run_id=run_id, command_id=stale.id, type="COMMAND_STALE").outcome == "BRANCH_ENDED"
    assert command(live.command_id).status == "PARKED"
    run = Run.objects.get(pk=run_id)
    assert run.status == "FAILED" and run.open_signals == 1


def test_a_completion_on_a_failed_run_is_rejected_and_reopens_the_task_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(FAILING_FORK)
    run_id = _failed_fork(celery_worker_process)
    task = open_task(run_id, "review")
    recorded = operations.complete_task(task_id=task.id, decision="approve")
    settle(run_id, celery_worker_process)

    completion = command(recorded.command_id)
    assert completion.status == "REJECTED" and completion.last_error.startswith("INSTANCE_FAILED")
    task.refresh_from_db()
    assert task.status == "OPEN" and task.reservation_owner is None  # reopened, not cancelled
    run = Run.objects.get(pk=run_id)
    assert run.status == "FAILED" and branch(run_id, "review").current_step == "review"
    entry = HistoryEntry.objects.get(run_id=run_id, command_id=completion.id, type="COMMAND_REJECTED")
    assert entry.outcome == "INSTANCE_FAILED"
    assert not HistoryEntry.objects.filter(run_id=run_id, type="TASK_COMPLETED").exists()


# Revision 1 waits for `first`, `second`, then `third`; revision 2 (same contract) never waits
# for `second`.
PARKED_MIGRATION = """
definitionId: parked-move
definitionVersion: {v}
contract: {{name: parked-move.v1, signals: {{first: null, second: null, third: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: wait-first
steps:
  - {{id: wait-first, type: wait-signal, signal: first, next: {after_first}}}
{second}  - {{id: wait-third, type: wait-signal, signal: third, set: "{{'third': payload.n}}", next: done}}
  - {{id: done, type: complete}}
"""
SECOND = "  - {id: wait-second, type: wait-signal, signal: second, set: \"{'second': true}\", next: wait-third}\n"


def test_migration_rejects_the_parked_signals_the_target_never_waits_for_and_applies_the_rest_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(PARKED_MIGRATION.format(v=1, after_first="wait-second", second=SECOND))
    deploy(PARKED_MIGRATION.format(v=2, after_first="wait-third", second=""), activate=False)
    run_id = operations.start(definition_id="parked-move", version=1, payload={}).run_id
    settle(run_id, celery_worker_process)
    second = operations.signal(run_id=run_id, name="second")
    third = operations.signal(run_id=run_id, name="third", payload={"n": 3})
    settle(run_id, celery_worker_process)
    assert [command(c.command_id).status for c in (second, third)] == ["PARKED", "PARKED"]

    moved = operations.migrate(run_id=run_id, target_version=2, target_step="wait-third")
    settle(run_id, celery_worker_process)
    assert command(moved.command_id).status == "COMPLETE", celery_worker_process.logs()
    refused = command(second.command_id)
    assert refused.status == "REJECTED" and refused.last_error.startswith("SIGNAL_REJECTED")
    assert command(third.command_id).status == "COMPLETE"
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.version, run.state) == ("COMPLETED", 2, {"third": 3})
    assert run.open_signals == 0
    types = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", "command_id"))
    assert types.index(("WORKFLOW_MIGRATED", moved.command_id)) < types.index(("SIGNAL_APPLIED", third.command_id))


# An approval that requires the reviewed subject version to be the run's current one.
STABLE_REVIEW = """
definitionId: stable-review
definitionVersion: 1
contract: {name: stable-review.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
subject: "{'type': 'order', 'id': state.order, 'version': state.rev}"
initialStep: review
steps:
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    requireVersionStability: true
    decisions: [{name: approve, set: "{'approved': true}", next: done}]
  - {id: done, type: complete}
"""


def test_a_completion_for_a_stale_subject_version_is_refused_and_the_current_one_completes_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(STABLE_REVIEW)
    run_id = operations.start(definition_id="stable-review", payload={"order": "O-1", "rev": "7"}).run_id
    settle(run_id, celery_worker_process)
    task = open_task(run_id, "review")
    assert task.require_version_stability and Run.objects.get(pk=run_id).subject_version == "7"

    with pytest.raises(TaskNotWaiting) as refused:
        operations.complete_task(task_id=task.id, decision="approve", subject_version="6")
    assert refused.value.code == "TASK_NOT_WAITING"
    task.refresh_from_db()
    assert task.status == "OPEN" and not Command.objects.filter(run_id=run_id, kind="COMPLETION").exists()

    operations.complete_task(task_id=task.id, decision="approve", subject_version="7")
    settle(run_id, celery_worker_process)
    run = Run.objects.get(pk=run_id)
    assert run.status == "COMPLETED" and run.state["approved"] is True


def test_the_executor_checks_version_stability_from_the_plan_for_a_task_row_without_it_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(STABLE_REVIEW)
    run_id = operations.start(definition_id="stable-review", payload={"order": "O-2", "rev": "3"}).run_id
    settle(run_id, celery_worker_process)
    task = open_task(run_id, "review")
    # a task row written before the stability column was stored: recording cannot check it
    Task.objects.filter(pk=task.pk).update(require_version_stability=False)
    stale = operations.complete_task(task_id=task.id, decision="approve", subject_version="2")
    settle(run_id, celery_worker_process)

    completion = command(stale.command_id)
    assert completion.status == "REJECTED", celery_worker_process.logs()
    assert completion.last_error.startswith("DETERMINISTIC_FAILURE") and "stale" in completion.last_error
    task.refresh_from_db()
    assert task.status == "OPEN" and task.reservation_owner is None
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_step, run.state_version) == ("WAITING", "review", 1)
    assert "approved" not in run.state

    operations.complete_task(task_id=task.id, decision="approve", subject_version="3")
    settle(run_id, celery_worker_process)
    assert Run.objects.get(pk=run_id).status == "COMPLETED"


def test_retry_applies_a_branch_signal_parked_while_the_run_had_failed_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    # Issue #26 (engine 143, 152, 160): a signal for a live branch, recorded while the run had
    # failed, is parked for a retry; the retry returned the run to its join but applied no
    # parked signal at the waits of its branches, so the signal stayed parked for good.
    deploy(FAILING_FORK)
    run_id = operations.start(definition_id="failing-fork", payload={}).run_id
    settle(run_id, celery_worker_process)
    make_due(run_id, "FIRE")
    eventually(
        lambda: Run.objects.get(pk=run_id).status == "FAILED",
        timeout=60,
        what="the run to fail at its timer",
        details=celery_worker_process.logs,
    )
    for_quick = operations.signal(run_id=run_id, name="go", branch="quick")
    settle(run_id, celery_worker_process)
    assert command(for_quick.command_id).status == "PARKED"

    retried = operations.retry(run_id=run_id)
    settle(run_id, celery_worker_process)
    assert command(retried.command_id).status == "COMPLETE", celery_worker_process.logs()
    assert command(for_quick.command_id).status == "COMPLETE"
    assert branch(run_id, "quick").status == "COMPLETED"
    applied = HistoryEntry.objects.get(run_id=run_id, type="SIGNAL_APPLIED")
    assert (applied.command_id, applied.branch_id) == (for_quick.command_id, "quick")
    # the re-armed timer, due at its original time, runs the broken decision again
    run = Run.objects.get(pk=run_id)
    assert run.status == "FAILED" and run.open_signals == 0


def test_a_pending_run_is_cancelled_without_running_any_workflow_code_through_the_worker(
    celery_worker_process: Any, deploy: Any
) -> None:
    # its initial state cannot be computed: a cancel (or a worker) that computed it would fail
    deploy(
        TWO_WAITS.replace("definitionId: two-waits", "definitionId: never-started").replace(
            "startPayloadSchema: {type: object}",
            "startPayloadSchema: {type: object}\ninitialState: payload.no.such",
        )
    )
    # one commit: the worker first sees the run already cancelled
    with transaction.atomic():
        recorded = operations.start(definition_id="never-started", payload={})
        operations.cancel(run_id=recorded.run_id, reason="not needed")
    settle(recorded.run_id, celery_worker_process)

    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "CANCELLED" and run.state is None and run.current_step is None
    assert (run.subject_type, run.subject_id, run.subject_version) == ("", "", "")
    start = command(recorded.command_id)
    assert (start.status, start.last_error) == (
        "CANCELLED",
        "INSTANCE_CANCELLED: the run was cancelled (START not applied)",
    )
    types = list(HistoryEntry.objects.filter(run_id=run.id).order_by("seq").values_list("type", flat=True))
    assert types == ["COMMAND_CANCELLED", "CANCELLED", "WORKFLOW_CANCELLED"]
    shown = queries.query(run_id=run.id)
    assert shown["state"] is None and shown["current_step"] is None and shown["status"] == "CANCELLED"
