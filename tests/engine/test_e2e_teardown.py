"""Teardown all the way down, through a real Celery worker (issue #26, items 12 and 14).

The story: a called run cancelled by an operator left its caller WAITING on it forever; a
branch that failed, and an ``any`` join that abandoned a branch, left the runs those branches
had called WAITING with their approvals still in approvers' inboxes; an ``end`` inside a
branch wrote its own branch row back as RUNNING; and a fork's ``retryPolicy`` was parsed and
hashed but a failed branch was never retried. Each test below failed before its fix.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.test_forks_and_calls import CHILD, MIDDLE, PARENT
from tests.support.waiting import eventually
from workflows import operations, queries
from workflows.engine import history as history_log
from workflows.models import Branch, HistoryEntry, Run, Task, Timer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OPEN = ("OPEN", "COMPLETING")
LIVE_BRANCH = ("RUNNING", "WAITING")

ONE_APPROVAL = """
definitionId: one-approval
definitionVersion: 1
contract: {name: one-approval.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: approve
steps:
  - id: approve
    type: human-task
    title: Child approval
    assignment: {mode: user, value: alice}
    due: {after: P3D, next: done}
    decisions: [{name: approve, next: done}]
  - id: done
    type: complete
"""

CALLER = """
definitionId: caller
definitionVersion: 1
contract: {name: caller.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: call-child
steps:
  - id: call-child
    type: call
    definitionId: one-approval
    set: "{'child': status}"
    next: done
    onFailure: child-failed
  - id: done
    type: complete
  - id: child-failed
    type: fail
    errorType: child-failed
"""


def branch_calls(policy: str) -> str:
    """A fork whose ``called`` branch waits on a child run (two approvals of its own) while
    its ``review`` branch waits on alice's approval (reject: the branch fails)."""
    return f"""
definitionId: branch-calls
definitionVersion: 1
contract: {{name: branch-calls.v1, signals: {{}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: split
steps:
  - id: split
    type: fork
    branches: [called, review]
    join: gather
  - id: called
    type: call
    definitionId: child-review
    next: gather
  - id: review
    type: human-task
    title: Branch review
    assignment: {{mode: user, value: alice}}
    decisions:
      - {{name: approve, next: gather}}
      - {{name: reject, next: review-failed}}
  - id: review-failed
    type: fail
    errorType: review-rejected
  - id: gather
    type: join
    policy: {policy}
    next: done
  - id: done
    type: complete
"""


def _status(run_id: Any) -> str:
    return str(Run.objects.get(pk=run_id).status)


def _idle(worker: Any) -> None:
    assert operations.await_idle(60).idle, worker.logs()


def _cancel_entry(run_id: Any) -> HistoryEntry:
    return HistoryEntry.objects.get(run_id=run_id, type="CANCELLED")


def _waiting_chain(worker: Any, demo_users: dict[str, Any]) -> tuple[Any, Run, Run]:
    """parent → middle → child-review, the child's two approvals in alice's inbox."""
    top = operations.start(definition_id="parent", payload={}).run_id
    eventually(
        lambda: queries.tasks_for(demo_users["alice"]).count() == 2,
        timeout=60,
        what="the grandchild's approvals in alice's inbox",
        details=worker.logs,
    )
    middle = Run.objects.get(parent_run_id=top)
    child = Run.objects.get(parent_run_id=middle.id)
    return top, middle, child


# --- 12. a cancelled called run takes its callers with it, callers first ----------------------


def test_cancelling_a_called_run_cancels_the_runs_waiting_on_it_callers_first(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(CHILD)
    deploy(MIDDLE)
    deploy(PARENT)
    top, middle, child = _waiting_chain(celery_worker_process, demo_users)

    operations.cancel(run_id=child.id, reason="duplicate", actor=demo_users["admin"])

    # before the fix the two callers stayed WAITING on a cancelled run, for ever
    runs = {str(r.id): r for r in Run.objects.filter(pk__in=[top, middle.id, child.id])}
    top, middle_id, child_id = str(top), str(middle.id), str(child.id)
    assert {r.status for r in runs.values()} == {"CANCELLED"}
    assert (runs[child_id].cancel_reason, runs[middle_id].cancel_reason) == ("duplicate", "called run cancelled")
    assert runs[top].cancel_reason == "called run cancelled"
    # callers are closed before their children
    assert runs[top].ended_at <= runs[middle_id].ended_at <= runs[child_id].ended_at
    assert _cancel_entry(child.id).actor_id == "admin"
    assert queries.tasks_for(demo_users["alice"]).count() == 0
    assert not Timer.objects.filter(status="SCHEDULED").exists()
    _idle(celery_worker_process)
    assert set(Run.objects.values_list("status", flat=True)) == {"CANCELLED"}  # no late resume


def test_a_called_run_cancelled_by_the_migrate_dialog_cancels_its_caller_through_the_worker(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(ONE_APPROVAL)
    deploy(CALLER)
    caller = operations.start(definition_id="caller", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run__parent_run_id=caller, status="OPEN").exists(),
        timeout=60,
        what="the called run's approval",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=caller)

    operations.migrate(run_id=child.id, target_version=1, action="cancel", actor=demo_users["admin"])

    # before the fix the caller waited at its call for ever
    eventually(
        lambda: _status(caller) == "CANCELLED",
        timeout=60,
        what="the caller cancelled after its called run",
        details=celery_worker_process.logs,
    )
    _idle(celery_worker_process)
    assert (_status(child.id), Run.objects.get(pk=caller).cancel_reason) == ("CANCELLED", "called run cancelled")
    # not its onFailure path: a cancelled call is no failure of the child's work
    assert not HistoryEntry.objects.filter(run_id=caller, type="WORKFLOW_FAILED").exists()
    assert not Task.objects.filter(status__in=OPEN).exists()
    assert not Timer.objects.filter(status="SCHEDULED").exists()


def test_a_called_run_ended_by_the_migrate_dialog_returns_to_its_caller(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(ONE_APPROVAL)
    deploy(CALLER)
    caller = operations.start(definition_id="caller", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run__parent_run_id=caller, status="OPEN").exists(),
        timeout=60,
        what="the called run's approval",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=caller)

    operations.migrate(run_id=child.id, target_version=1, action="end")

    eventually(
        lambda: _status(caller) == "COMPLETED",
        timeout=60,
        what="the caller resumed by its ended child",
        details=celery_worker_process.logs,
    )
    assert _status(child.id) == "COMPLETED"
    assert Run.objects.get(pk=caller).state == {"child": "COMPLETED"}
    assert not Task.objects.filter(status__in=OPEN).exists()


@pytest.mark.parametrize(("action", "ended"), [("cancel", "CANCELLED"), ("end", "COMPLETED")])
def test_the_migrate_dialogs_cancel_and_end_of_a_caller_cancel_the_run_it_called(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any], action: str, ended: str
) -> None:
    deploy(ONE_APPROVAL)
    deploy(CALLER)
    caller = operations.start(definition_id="caller", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run__parent_run_id=caller, status="OPEN").exists(),
        timeout=60,
        what="the called run's approval",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=caller)

    operations.migrate(run_id=caller, target_version=1, action=action, actor=demo_users["admin"])

    eventually(lambda: _status(caller) == ended, timeout=60, what=action, details=celery_worker_process.logs)
    _idle(celery_worker_process)
    assert _status(child.id) == "CANCELLED"
    assert queries.tasks_for(demo_users["alice"]).count() == 0
    assert not Timer.objects.filter(status="SCHEDULED").exists()


def test_a_failed_branch_cancels_the_run_another_branch_called(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(CHILD)
    deploy(branch_calls("all"))
    run_id = operations.start(definition_id="branch-calls", payload={}).run_id
    eventually(
        lambda: queries.tasks_for(demo_users["alice"]).count() == 3,
        timeout=60,
        what="the branch review and the called run's two approvals",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=run_id)
    review = Task.objects.get(run_id=run_id, step="review")

    operations.complete_task(task_id=review.id, decision="reject")

    eventually(lambda: _status(run_id) == "FAILED", timeout=60, what="the join", details=celery_worker_process.logs)
    _idle(celery_worker_process)
    assert Run.objects.get(pk=run_id).failure_code == "BRANCH_FAILED"
    # before the fix the called run stayed WAITING, its approvals in alice's inbox
    assert _status(child.id) == "CANCELLED"
    assert queries.tasks_for(demo_users["alice"]).count() == 0
    assert not Task.objects.filter(status__in=OPEN).exists()
    assert not Timer.objects.filter(status="SCHEDULED").exists()
    assert not Branch.objects.filter(status__in=LIVE_BRANCH).exists()


def test_an_any_join_cancels_the_run_the_abandoned_branch_called(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(CHILD)
    deploy(branch_calls("any"))
    run_id = operations.start(definition_id="branch-calls", payload={}).run_id
    eventually(
        lambda: queries.tasks_for(demo_users["alice"]).count() == 3,
        timeout=60,
        what="the branch review and the called run's two approvals",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=run_id)
    review = Task.objects.get(run_id=run_id, step="review")

    operations.complete_task(task_id=review.id, decision="approve")

    eventually(lambda: _status(run_id) == "COMPLETED", timeout=60, what="the join", details=celery_worker_process.logs)
    _idle(celery_worker_process)
    branches = dict(Branch.objects.filter(run_id=run_id).values_list("branch_id", "status"))
    assert branches == {"review": "COMPLETED", "called": "SUPERSEDED"}
    # before the fix the abandoned branch's called run stayed WAITING with its approvals open
    assert _status(child.id) == "CANCELLED"
    assert _cancel_entry(child.id).payload == {"reason": "branch superseded"}
    assert queries.tasks_for(demo_users["alice"]).count() == 0
    assert not Timer.objects.filter(status="SCHEDULED").exists()


def test_cancelling_a_run_a_branch_waits_on_cancels_the_forked_caller(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(CHILD)
    deploy(branch_calls("all"))
    run_id = operations.start(definition_id="branch-calls", payload={}).run_id
    eventually(
        lambda: queries.tasks_for(demo_users["alice"]).count() == 3,
        timeout=60,
        what="the branch review and the called run's two approvals",
        details=celery_worker_process.logs,
    )
    child = Run.objects.get(parent_run_id=run_id)

    operations.cancel(run_id=child.id, reason="not needed")

    # the caller waited on it in a branch: before the fix it waited at its join for ever
    assert (_status(run_id), _status(child.id)) == ("CANCELLED", "CANCELLED")
    assert not Branch.objects.filter(run_id=run_id, status__in=LIVE_BRANCH).exists()
    assert queries.tasks_for(demo_users["alice"]).count() == 0
    _idle(celery_worker_process)
    assert {_status(run_id), _status(child.id)} == {"CANCELLED"}


# --- the `end` step inside a branch -------------------------------------------------------------

BRANCH_END = """
definitionId: branch-end
definitionVersion: 1
contract: {name: branch-end.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: split
steps:
  - {id: split, type: fork, branches: [decide, review], join: gather}
  - id: decide
    type: human-task
    title: Go on or stop
    assignment: {mode: user, value: alice}
    decisions: [{name: go, next: gather}, {name: stop, next: terminate}]
  - {id: terminate, type: end, reason: stopped}
  - id: review
    type: human-task
    title: Review
    assignment: {mode: user, value: bob}
    due: {after: P3D, next: gather}
    decisions: [{name: approve, next: gather}]
  - {id: gather, type: join, policy: all, next: done}
  - {id: done, type: complete}
"""


def test_end_inside_a_branch_tears_down_every_branch_its_own_included(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(BRANCH_END)
    run_id = operations.start(definition_id="branch-end", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run_id=run_id, status="OPEN").count() == 2,
        timeout=60,
        what="both branches' approvals",
        details=celery_worker_process.logs,
    )
    decide = Task.objects.get(run_id=run_id, step="decide")

    operations.complete_task(task_id=decide.id, decision="stop")

    eventually(lambda: _status(run_id) == "COMPLETED", timeout=60, what="the end", details=celery_worker_process.logs)
    _idle(celery_worker_process)
    # before the fix the ending branch's own row was written back RUNNING after the teardown
    branches = dict(Branch.objects.filter(run_id=run_id).values_list("branch_id", "status"))
    assert branches == {"decide": "CANCELLED", "review": "CANCELLED"}
    assert queries.tasks_for(demo_users["bob"]).count() == 0
    assert Task.objects.get(run_id=run_id, step="review").status == "WITHDRAWN"
    assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()
    assert queries.query(run_id=run_id)["waits"] == []
    completed = HistoryEntry.objects.get(run_id=run_id, type="WORKFLOW_COMPLETED")
    assert completed.payload == {"reason": "stopped"}


# --- 14. the fork's retryPolicy ------------------------------------------------------------------

RETRIED = """
definitionId: retried-branches
definitionVersion: 1
contract: {name: retried-branches.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: split
steps:
  - id: split
    type: fork
    branches: [check, other]
    join: gather
    retryPolicy: {maxAttempts: 3}
  - id: check
    type: human-task
    title: Check
    assignment: {mode: user, value: alice}
    decisions:
      - {name: pass, set: "{'checked': true}", next: gather}
      - {name: fail, set: "{'spoiled': true}", next: check-failed}
  - {id: check-failed, type: fail, errorType: check-failed}
  - id: other
    type: human-task
    title: Other
    assignment: {mode: user, value: bob}
    decisions: [{name: approve, next: gather}]
  - {id: gather, type: join, policy: all, next: done, onFailure: gave-up}
  - {id: done, type: complete}
  - {id: gave-up, type: fail, errorType: gave-up}
"""


def _fail_check(run_id: Any, worker: Any, attempt: int) -> None:
    task = Task.objects.get(run_id=run_id, step="check", status="OPEN")
    operations.complete_task(task_id=task.id, decision="fail")
    eventually(
        lambda: Task.objects.filter(run_id=run_id, step="check", status="COMPLETED").count() == attempt,
        timeout=60,
        what=f"attempt {attempt} of the check failed",
        details=worker.logs,
    )
    assert operations.await_idle(60, run_id=run_id).idle


def test_a_failed_branch_is_retried_up_to_the_forks_max_attempts(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(RETRIED)
    run_id = operations.start(definition_id="retried-branches", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run_id=run_id, status="OPEN").count() == 2,
        timeout=60,
        what="both branches' approvals",
        details=celery_worker_process.logs,
    )

    _fail_check(run_id, celery_worker_process, 1)
    # before the fix the first failure failed the join: the run went down onFailure
    assert _status(run_id) == "WAITING"
    branch = Branch.objects.get(run_id=run_id, branch_id="check")
    assert (branch.status, branch.attempts, branch.current_step) == ("WAITING", 1, "check")
    assert branch.state == {}  # a fresh copy of what the fork dispatched, not the failed attempt's
    assert Task.objects.filter(run_id=run_id, step="check", status="OPEN").count() == 1
    assert queries.tasks_for(demo_users["alice"]).count() == 1

    _fail_check(run_id, celery_worker_process, 2)
    assert _status(run_id) == "WAITING"
    assert Branch.objects.get(run_id=run_id, branch_id="check").attempts == 2

    _fail_check(run_id, celery_worker_process, 3)  # the third attempt was the last
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.failure_code) == ("FAILED", "gave-up")
    branches = dict(Branch.objects.filter(run_id=run_id).values_list("branch_id", "status"))
    assert branches == {"check": "FAILED", "other": "SUPERSEDED"}
    retried = HistoryEntry.objects.filter(run_id=run_id, type="BRANCH_RETRIED").order_by("seq")
    assert [e.payload for e in retried] == [{"attempt": 2, "max_attempts": 3}, {"attempt": 3, "max_attempts": 3}]
    assert HistoryEntry.objects.filter(run_id=run_id, type="BRANCH_FAILED", branch_id="check").count() == 3
    assert not Task.objects.filter(run_id=run_id, status__in=OPEN).exists()


def test_a_retried_branch_that_passes_joins_with_its_own_state(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(RETRIED)
    run_id = operations.start(definition_id="retried-branches", payload={}).run_id
    eventually(
        lambda: Task.objects.filter(run_id=run_id, status="OPEN").count() == 2,
        timeout=60,
        what="both branches' approvals",
        details=celery_worker_process.logs,
    )
    _fail_check(run_id, celery_worker_process, 1)
    check = Task.objects.get(run_id=run_id, step="check", status="OPEN")
    operations.complete_task(task_id=check.id, decision="pass")
    other = Task.objects.get(run_id=run_id, step="other", status="OPEN")
    operations.complete_task(task_id=other.id, decision="approve")

    eventually(lambda: _status(run_id) == "COMPLETED", timeout=60, what="the join", details=celery_worker_process.logs)
    # the failed attempt's change (spoiled) is not folded in: the retry started from the fork's state
    assert Run.objects.get(pk=run_id).state == {"checked": True}
    entries = [dict(e) for e in HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values()]
    assert history_log.replay(entries) == {"checked": True}  # the decision log agrees
    assert dict(Branch.objects.filter(run_id=run_id).values_list("branch_id", "status")) == {
        "check": "COMPLETED",
        "other": "COMPLETED",
    }
