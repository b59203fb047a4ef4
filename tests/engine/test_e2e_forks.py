"""Fork/join, calls and sagas through a real Celery worker (and a worker killed mid-saga)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_forks_and_calls import CHILD, MIDDLE, PARENT, fork_doc
from tests.support.waiting import eventually
from workflows import operations, queries
from workflows.definitions.steps.join import JOIN_POLICIES
from workflows.engine import history as history_log
from workflows.models import Branch, HistoryEntry, OutboxIntent, Run, Task, Timer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BRANCHES = ("finance", "security", "legal")


def _status(run_id: Any) -> str:
    return Run.objects.get(pk=run_id).status


def _branch_statuses(run_id: Any) -> dict[str, str]:
    return dict(Branch.objects.filter(run_id=run_id).values_list("branch_id", "status"))


def _inbox(user: Any) -> set[str]:
    return set(queries.tasks_for(user).values_list("step", flat=True))


def _history(run_id: Any, type_: str, **filters: Any) -> list[tuple[str, str, str]]:
    entries = queries.history(run_id=run_id).filter(type=type_, **filters)
    return [(e.step, e.branch_id, e.outcome) for e in entries]


def _act(run_id: Any, branch: str) -> None:
    """What the branch waits for: an approval (finance, security) or the legal-ok signal."""
    if branch == "legal":
        operations.signal(run_id=run_id, name="legal-ok", branch="legal")
    else:
        task = Task.objects.get(run_id=run_id, step=branch, status="OPEN")
        operations.complete_task(task_id=task.id, decision="approve")


def _forked(run_id: Any, worker: Any) -> None:
    eventually(
        lambda: _branch_statuses(run_id) == dict.fromkeys(BRANCHES, "WAITING"),
        timeout=60,
        what="the three branches waiting (two approvals, one signal)",
        details=worker.logs,
    )


@dataclass(frozen=True)
class JoinCase:
    policy: str
    count: int | None
    before: tuple[str, ...]  # branches that finish while the join still waits
    deciding: str  # the branch whose end meets the policy

    @property
    def joined(self) -> set[str]:
        return {*self.before, self.deciding}

    @property
    def superseded(self) -> set[str]:
        return set(BRANCHES) - self.joined


JOIN_CASES = [
    JoinCase("all", None, before=("finance", "legal"), deciding="security"),
    # security's approval wins: finance's group approval and legal's signal wait are superseded
    JoinCase("any", None, before=(), deciding="security"),
    JoinCase("n-of-m", 2, before=("legal",), deciding="security"),
]


@pytest.mark.parametrize("case", JOIN_CASES, ids=[c.policy for c in JOIN_CASES])
def test_three_branch_fork_joins_under_each_policy_through_the_worker(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any], case: JoinCase
) -> None:
    assert {c.policy for c in JOIN_CASES} == set(JOIN_POLICIES)  # every policy the product accepts
    alice, bob = demo_users["alice"], demo_users["bob"]
    deploy(fork_doc(case.policy, case.count))
    run_id = operations.start(definition_id="reviews", payload={}).run_id
    _forked(run_id, celery_worker_process)
    assert _inbox(alice) == {"finance", "security"} and _inbox(bob) == {"finance"}

    for branch in case.before:
        _act(run_id, branch)
    assert operations.await_idle(60, run_id=run_id).idle
    # the policy is not met yet: the run still waits at the join
    view = queries.query(run_id=run_id)
    assert view["status"] == "WAITING"
    assert {w["branch"] for w in view["waits"] if w["branch"]} == set(BRANCHES) - set(case.before)
    assert _branch_statuses(run_id) == {b: "COMPLETED" if b in case.before else "WAITING" for b in BRANCHES}
    assert [o for _, _, o in _history(run_id, "DECISION", step="gather")] == ["wait-join"]

    _act(run_id, case.deciding)
    eventually(lambda: _status(run_id) == "COMPLETED", timeout=60, what="the join", details=celery_worker_process.logs)
    assert operations.await_idle(60, run_id=run_id).idle

    run = Run.objects.get(pk=run_id)
    view = queries.query(run_id=run_id)
    assert (view["status"], view["current_step"], view["failure"], view["waits"]) == ("COMPLETED", "done", None, [])
    assert _branch_statuses(run_id) == {b: "COMPLETED" if b in case.joined else "SUPERSEDED" for b in BRANCHES}
    # only the joined branches' changes are folded into the state
    assert run.state == {b: "ok" for b in case.joined}
    # the superseded branches' approvals are withdrawn: gone from every approver's inbox
    tasks = dict(Task.objects.filter(run_id=run_id).values_list("step", "status"))
    assert tasks == {b: "COMPLETED" if b in case.joined else "WITHDRAWN" for b in ("finance", "security")}
    assert _inbox(alice) == set() and _inbox(bob) == set()
    assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()

    assert [o for _, _, o in _history(run_id, "DECISION", step="gather")] == ["wait-join", "joined"]
    assert {b for _, b, _ in _history(run_id, "BRANCH_COMPLETED")} == case.joined
    assert len(_history(run_id, "BRANCH_COMPLETED")) == len(case.joined)
    withdrawn = {b for b in case.superseded if b != "legal"}
    assert sorted((s, b) for s, b, _ in _history(run_id, "TASK_WITHDRAWN")) == sorted((b, b) for b in withdrawn)
    if "legal" in case.superseded:  # its signal timeout disarmed with the branch
        assert [(s, b) for s, b, _ in _history(run_id, "TIMER_CANCELLED")] == [("legal", "legal")]
    assert len(_history(run_id, "WORKFLOW_COMPLETED")) == 1
    entries = [dict(e) for e in HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values()]
    assert history_log.replay(entries) == run.state  # the history alone rebuilds the joined state


def test_rejected_approval_in_a_branch_routes_through_on_failure_through_the_worker(
    celery_worker_process: Any, deploy: Any, demo_users: dict[str, Any]
) -> None:
    deploy(fork_doc("all"))
    run_id = operations.start(definition_id="reviews", payload={}).run_id
    _forked(run_id, celery_worker_process)
    finance = Task.objects.get(run_id=run_id, step="finance", status="OPEN")
    operations.complete_task(task_id=finance.id, decision="reject")
    eventually(lambda: _status(run_id) == "FAILED", timeout=60, what="onFailure", details=celery_worker_process.logs)
    assert operations.await_idle(60, run_id=run_id).idle

    view = queries.query(run_id=run_id)
    assert (view["status"], view["current_step"], view["waits"]) == ("FAILED", "rejected", [])
    assert view["failure"]["code"] == "review-failed"
    assert _branch_statuses(run_id) == {"finance": "FAILED", "security": "SUPERSEDED", "legal": "SUPERSEDED"}
    assert not Task.objects.filter(run_id=run_id, status__in=["OPEN", "COMPLETING"]).exists()
    assert _inbox(demo_users["alice"]) == set() and _inbox(demo_users["bob"]) == set()
    assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()
    assert _history(run_id, "BRANCH_FAILED") == [("finance-failed", "finance", "")]
    assert [o for _, _, o in _history(run_id, "DECISION", step="gather")] == ["wait-join", "join-failed"]
    # the failure went through onFailure (the `rejected` step), not the join's own BRANCH_FAILED end
    assert _history(run_id, "WORKFLOW_FAILED") == [("rejected", "", "review-failed")]


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
    # killed inside the first compensation's delivery, which runs on the outbound queue's
    # worker (issue #40: deliveries never run on the executor's)
    celery_worker_process.kill_outbound_worker()
    crash_celery_worker()
    gate.unlink()
    eventually(
        lambda: OutboxIntent.objects.filter(run_id=run_id, kind="COMPENSATION", status="DELIVERED").count() == 3,
        timeout=90,
        what="all compensations delivered",
        details=celery_worker_process.logs,
    )
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.failure_code) == ("COMPENSATED", "out-of-stock")

    # The engine's record: each compensation decided once, in reverse order of the forward steps.
    assert _history(run_id, "COMPENSATION_STARTED") == [("boom", "", "")]
    dispatched = queries.history(run_id=run_id).filter(type="COMPENSATION_DISPATCHED")
    assert [(e.step, (e.payload or {}).get("forward_step")) for e in dispatched] == [
        ("undo-three", "three"),
        ("undo-two", "two"),
        ("undo-one", "one"),
    ]
    intents = list(OutboxIntent.objects.filter(run_id=run_id, kind="COMPENSATION").order_by("id"))
    assert [i.step for i in intents] == ["undo-three", "undo-two", "undo-one"]
    # the kill interrupted undo-three's delivery: it was claimed again once its lease lapsed
    assert intents[0].attempts >= 2

    # The receiver: only those three keys; a repeated key is the redelivery of the compensation
    # it just applied (at least once), never a compensation applied again after a later one.
    step_of_key = {i.idempotency_key: i.step.removeprefix("undo-") for i in intents}
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert {line["key"] for line in lines} == set(step_of_key)
    assert all(step_of_key[line["key"]] == line["step"] for line in lines)
    applied = [line["step"] for n, line in enumerate(lines) if n == 0 or lines[n - 1]["key"] != line["key"]]
    assert applied == ["three", "two", "one"]
