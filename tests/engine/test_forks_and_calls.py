"""Fork/join under each policy, branch-addressed work, calls and teardown to the bottom."""

from __future__ import annotations

from typing import Any

import pytest

from workflows import operations
from workflows.definitions import catalogs
from workflows.engine import history as history_log
from workflows.engine import outbox
from workflows.models import Branch, Command, HistoryEntry, Run, Task, Timer


def fork_doc(policy: str, count: int | None = None, definition_id: str = "reviews") -> str:
    count_line = f"    count: {count}\n" if count else ""
    return f"""
definitionId: {definition_id}
definitionVersion: 1
contract: {{name: reviews.v1, signals: {{legal-ok: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: split
steps:
  - id: split
    type: fork
    branches: [finance, security, legal]
    join: gather
  - id: finance
    type: human-task
    title: Finance review
    assignment: {{mode: group, value: approvers}}
    decisions:
      - {{name: approve, set: "{{'finance': 'ok'}}", next: gather}}
      - {{name: reject, next: finance-failed}}
  - id: finance-failed
    type: fail
    errorType: finance-rejected
  - id: security
    type: human-task
    title: Security review
    assignment: {{mode: user, value: alice}}
    decisions:
      - {{name: approve, set: "{{'security': 'ok'}}", next: gather}}
  - id: legal
    type: wait-signal
    signal: legal-ok
    set: "{{'legal': 'ok'}}"
    next: gather
    timeout: {{after: P1D, next: gather}}
  - id: gather
    type: join
    policy: {policy}
{count_line}    next: done
    onFailure: rejected
  - id: done
    type: complete
  - id: rejected
    type: fail
    errorType: review-failed
"""


def open_task(run_id: Any, step: str) -> Task:
    return Task.objects.get(run_id=run_id, step=step, status="OPEN")


@pytest.mark.django_db(transaction=True)
class TestForkJoin:
    def test_all_policy_waits_for_every_branch_and_folds_their_changes(self, deploy: Any, drain: Any) -> None:
        deploy(fork_doc("all"))
        run_id = operations.start(definition_id="reviews", payload={"n": 1}).run_id
        drain()
        run = Run.objects.get(pk=run_id)
        assert run.status == "WAITING"
        assert set(Branch.objects.filter(run_id=run_id).values_list("branch_id", "status")) == {
            ("finance", "WAITING"),
            ("security", "WAITING"),
            ("legal", "WAITING"),
        }
        operations.complete_task(task_id=open_task(run_id, "finance").id, decision="approve")
        operations.signal(run_id=run_id, name="legal-ok", branch="legal")
        drain()
        assert Run.objects.get(pk=run_id).status == "WAITING"
        operations.complete_task(task_id=open_task(run_id, "security").id, decision="approve")
        drain()
        run.refresh_from_db()
        assert run.status == "COMPLETED"
        assert run.state == {"n": 1, "finance": "ok", "security": "ok", "legal": "ok"}
        # the legal branch's timeout was disarmed when the branch left its wait
        assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()
        entries = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values())
        assert history_log.replay(entries) == run.state
        assert [e["outcome"] for e in entries if e["type"] == "DECISION" and e["step"] == "gather"] == [
            "wait-join",
            "joined",
        ]

    def test_any_policy_supersedes_the_other_branches(self, deploy: Any, drain: Any) -> None:
        deploy(fork_doc("any"))
        run_id = operations.start(definition_id="reviews", payload={}).run_id
        drain()
        operations.signal(run_id=run_id, name="legal-ok")  # instance-addressed: the one branch waiting for it
        drain()
        run = Run.objects.get(pk=run_id)
        assert run.status == "COMPLETED" and run.state == {"legal": "ok"}
        assert set(Task.objects.filter(run_id=run_id).values_list("status", flat=True)) == {"WITHDRAWN"}
        assert set(
            Branch.objects.filter(run_id=run_id).exclude(branch_id="legal").values_list("status", flat=True)
        ) == {"SUPERSEDED"}

    def test_n_of_m_policy(self, deploy: Any, drain: Any) -> None:
        deploy(fork_doc("n-of-m", 2))
        run_id = operations.start(definition_id="reviews", payload={}).run_id
        drain()
        operations.complete_task(task_id=open_task(run_id, "security").id, decision="approve")
        drain()
        assert Run.objects.get(pk=run_id).status == "WAITING"
        operations.signal(run_id=run_id, name="legal-ok", branch="legal")
        drain()
        assert Run.objects.get(pk=run_id).status == "COMPLETED"

    def test_rejected_approval_in_a_branch_routes_through_on_failure(self, deploy: Any, drain: Any) -> None:
        deploy(fork_doc("all"))
        run_id = operations.start(definition_id="reviews", payload={}).run_id
        drain()
        operations.complete_task(task_id=open_task(run_id, "finance").id, decision="reject")
        drain()
        run = Run.objects.get(pk=run_id)
        assert run.status == "FAILED" and run.failure_code == "review-failed"
        assert Branch.objects.get(run_id=run_id, branch_id="finance").status == "FAILED"
        assert not Task.objects.filter(run_id=run_id, status="OPEN").exists()

    def test_signal_to_an_ended_branch_is_stale(self, deploy: Any, drain: Any) -> None:
        deploy(fork_doc("all"))
        run_id = operations.start(definition_id="reviews", payload={}).run_id
        drain()
        operations.signal(run_id=run_id, name="legal-ok", branch="legal")
        drain()
        operations.signal(run_id=run_id, name="legal-ok", branch="legal")
        drain()
        assert [c.status for c in Command.objects.filter(run_id=run_id, kind="SIGNAL").order_by("seq")] == [
            "COMPLETE",
            "STALE",
        ]


CHILD = """
definitionId: child-review
definitionVersion: 1
contract: {name: child.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: split
steps:
  - id: split
    type: fork
    branches: [a, b]
    join: gather
  - id: a
    type: human-task
    title: Child approval A
    assignment: {mode: group, value: approvers}
    due: {after: PT1H, next: gather}
    decisions: [{name: approve, next: gather}]
  - id: b
    type: human-task
    title: Child approval B
    assignment: {mode: group, value: approvers}
    decisions: [{name: approve, next: gather}]
  - id: gather
    type: join
    policy: all
    next: done
  - id: done
    type: complete
"""

MIDDLE = """
definitionId: middle
definitionVersion: 1
contract: {name: middle.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: call-child
steps:
  - id: call-child
    type: call
    definitionId: child-review
    set: "{'child': result}"
    next: done
  - id: done
    type: complete
"""

PARENT = (
    MIDDLE.replace("definitionId: middle", "definitionId: parent")
    .replace("child-review", "middle")
    .replace("middle.v1", "parent.v1")
)


@pytest.mark.django_db(transaction=True)
class TestCalls:
    def _deliver(self) -> None:
        for intent_id in outbox.due_intents():
            outbox.deliver(intent_id)

    def test_child_completion_resumes_the_caller(self, deploy: Any, drain: Any) -> None:
        deploy(CHILD)
        deploy(MIDDLE)
        run_id = operations.start(definition_id="middle", payload={"x": 1}).run_id
        drain()
        child = Run.objects.get(parent_run_id=run_id)
        assert Run.objects.get(pk=run_id).status == "WAITING" and child.status == "WAITING"
        for task in Task.objects.filter(run_id=child.id, status="OPEN"):
            operations.complete_task(task_id=task.id, decision="approve")
        drain()
        assert Run.objects.get(pk=child.id).status == "COMPLETED"
        self._deliver()
        drain()
        parent = Run.objects.get(pk=run_id)
        assert parent.status == "COMPLETED" and parent.state["child"] == {"x": 1}

    def test_cancelling_the_top_of_a_two_level_chain_tears_everything_down(self, deploy: Any, drain: Any) -> None:
        deploy(CHILD)
        deploy(MIDDLE)
        deploy(PARENT)
        top = operations.start(definition_id="parent", payload={}).run_id
        drain()
        middle = Run.objects.get(parent_run_id=top)
        child = Run.objects.get(parent_run_id=middle.id)
        assert Task.objects.filter(run_id=child.id, status="OPEN").count() == 2
        operations.cancel(run_id=top, reason="no longer needed")
        assert {r.status for r in Run.objects.filter(pk__in=[top, middle.id, child.id])} == {"CANCELLED"}
        assert not Task.objects.filter(status="OPEN").exists()
        assert not Timer.objects.filter(status="SCHEDULED").exists()
        assert set(Branch.objects.filter(run_id=child.id).values_list("status", flat=True)) == {"CANCELLED"}
        self._deliver()
        drain()
        assert {r.status for r in Run.objects.filter(pk__in=[top, middle.id, child.id])} == {"CANCELLED"}

    def test_call_depth_is_bounded(self, deploy: Any, drain: Any, settings: Any) -> None:
        loop = (
            MIDDLE.replace("definitionId: middle", "definitionId: loop")
            .replace("definitionId: child-review", "definitionId: loop")
            .replace("middle.v1", "loop.v1")
        )
        deploy(loop)
        run_id = operations.start(definition_id="loop", payload={}).run_id
        for _ in range(40):
            if not drain():
                break
        failed = Run.objects.filter(definition_id="loop", status="FAILED")
        assert failed.count() == 1 and failed.get().failure_code == "CALL_DEPTH"
        # depths 0..16 were started; the 17th call was refused
        assert Run.objects.filter(definition_id="loop").count() == 17
        assert Run.objects.get(pk=run_id).call_depth == 0


SAGA = """
definitionId: saga
definitionVersion: 1
contract: {name: saga.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: one
steps:
  - {id: one, type: service, target: saga.do, compensation: undo-one, next: two}
  - {id: two, type: service, target: saga.do, compensation: undo-two, next: three}
  - {id: three, type: service, target: saga.do, compensation: undo-three, next: boom}
  - {id: boom, type: fail, errorType: out-of-stock}
  - {id: undo-one, type: compensation, forwardStep: one, target: saga.undo, payload: "{'step': 'one'}"}
  - {id: undo-two, type: compensation, forwardStep: two, target: saga.undo, payload: "{'step': 'two'}"}
  - {id: undo-three, type: compensation, forwardStep: three, target: saga.undo, payload: "{'step': 'three'}"}
"""
UNDONE: list[str] = []


@pytest.mark.django_db(transaction=True)
def test_saga_compensates_in_reverse_order_once(deploy: Any, drain: Any) -> None:
    catalogs.callbacks.add("saga.do", lambda payload: None, category="service")
    catalogs.callbacks.add("saga.undo", lambda payload: UNDONE.append(payload["step"]), category="service")
    try:
        deploy(SAGA)
        run_id = operations.start(definition_id="saga", payload={}).run_id
        drain()
        run = Run.objects.get(pk=run_id)
        assert run.status == "COMPENSATED" and run.failure_code == "out-of-stock"
        for _ in range(6):  # deliver repeatedly, as a redelivering broker would
            for intent_id in outbox.due_intents():
                outbox.deliver(intent_id)
                outbox.deliver(intent_id)
        assert UNDONE == ["three", "two", "one"]
    finally:
        catalogs.callbacks.unregister("saga.do", "service")
        catalogs.callbacks.unregister("saga.undo", "service")
        UNDONE.clear()
