"""A Hypothesis state machine over the engine: start, signal, claim, run a claim, complete,
crash (a claimer's lease lapses while it still holds its token), sweep and cancel, in any
order, with the invariants checked after every step.

The executor runs in-process. ``claim`` and ``run_claim`` are the two halves of an executor
pass taken apart, so a claimer can "crash" in between and come back later with a token
that no longer stands: its segment must then be fenced (refused), never applied.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from tests.reliability import invariants
from workflows import operations
from workflows.engine import db, executor, segment
from workflows.exceptions import WorkflowError
from workflows.models import Run

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

FULL = os.environ.get("RELIABILITY_MODE") == "full"
DEFINITION = "rel-sm"
DOCUMENT = """
definitionId: rel-sm
definitionVersion: 1
contract: {name: relsm.v1, signals: {go: {type: object}, note: {type: object}}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialState: "{'go': 0, 'notes': 0}"
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, set: "{'go': state.go + 1}", next: review}
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    decisions:
      - {name: approve, next: wait-note}
      - {name: reject, next: done}
  - {id: wait-note, type: wait-signal, signal: note, set: "{'notes': state.notes + 1}", next: done}
  - {id: done, type: complete}
"""
PARAMS = {"definition": DEFINITION}


class Engine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # each example starts from an empty slate (draws never depend on the database: every
        # choice is an index taken modulo what is there, so a replay draws the same values)
        Run.objects.filter(definition_id=DEFINITION).delete()
        self.runs: list[str] = []
        self.claims: list[tuple[executor.Head, Any]] = []  # held by claimers that may have crashed
        self.fenced = 0

    @rule()
    def start(self) -> None:
        self.runs.append(
            operations.start(definition_id=DEFINITION, payload={}, idempotency_key=uuid.uuid4().hex).run_id
        )

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 999), name=st.sampled_from(["go", "note"]), repeat=st.booleans())
    def signal(self, pick: int, name: str, repeat: bool) -> None:
        run_id = self.runs[pick % len(self.runs)]
        key = f"{name}-{run_id}" if repeat else uuid.uuid4().hex  # a repeated key answers the first recording
        try:
            operations.signal(run_id=run_id, name=name, payload={}, idempotency_key=key)
        except WorkflowError:
            pass  # an ended run refuses

    @rule()
    def claim(self) -> None:
        for head in executor.peek(5):
            if head.run_status in ("COMPLETED", "CANCELLED"):
                continue
            token = executor.claim(head, lease_seconds=30, max_attempts=50)
            if token is not None:
                self.claims.append((head, token))
                return

    @rule(pick=st.integers(0, 999))
    def run_claim(self, pick: int) -> None:
        if not self.claims:
            return
        head, token = self.claims.pop(pick % len(self.claims))
        plan = executor._plan_for(head)
        try:
            segment.run(command_id=head.id, run_id=head.run_id, token=token, plan=plan,
                        executor_id="state-machine", deadline=time.monotonic() + 20, max_steps=1000)  # fmt: skip
        except segment.Busy:
            executor._release(head.id, token)
        except segment.Fenced:
            self.fenced += 1

    @rule()
    def crash(self) -> None:
        """Every claimer still holding a claim stops renewing it: the leases lapse."""
        if not self.claims:
            return
        tokens = [str(t) for _, t in self.claims]
        db.execute(
            "UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE token = ANY(%s::uuid[])",
            [tokens],
        )

    @rule()
    def sweep(self) -> None:
        executor.recover_expired_leases()
        executor.drain(budget_seconds=5)

    @rule(pick=st.integers(0, 999), approve=st.booleans())
    def complete(self, pick: int, approve: bool) -> None:
        rows = db.fetchall(
            "SELECT t.id FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id WHERE r.definition_id = %s "
            "AND t.status = 'OPEN' ORDER BY t.created_at LIMIT 10",
            [DEFINITION],
        )
        if not rows:
            return
        task_id = str(rows[pick % len(rows)][0])
        try:
            operations.complete_task(task_id=task_id, decision="approve" if approve else "reject",
                                     idempotency_key=f"done-{task_id}")  # fmt: skip
        except WorkflowError:
            pass

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 999))
    def cancel(self, pick: int) -> None:
        try:
            operations.cancel(run_id=self.runs[pick % len(self.runs)], reason="state machine")
        except WorkflowError:
            pass

    @invariant()
    def every_invariant_holds(self) -> None:
        for check in (
            invariants.settled_once(PARAMS, allow_unsettled=True),
            invariants.history_contiguous(PARAMS),
            invariants.replay_matches_state(PARAMS),
            invariants.open_signals_counted(PARAMS),
            invariants.one_claim_per_run(PARAMS),
        ):
            assert check.ok, (check.name, check.as_dict())

    def teardown(self) -> None:
        """Every claimer crashes; the sweep must then leave nothing runnable behind."""
        self.crash()
        self.claims.clear()
        for _ in range(20):
            executor.recover_expired_leases()
            if not executor.drain(budget_seconds=5):
                break
        left = db.fetchone(
            "SELECT count(*) FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
            "WHERE r.definition_id = %s AND c.status IN ('PENDING','CLAIMED') AND c.available_at <= now()",
            [DEFINITION],
        )
        assert left is not None and left[0] == 0, "runnable commands left after the sweep"
        self.every_invariant_holds()


def test_the_engine_keeps_its_invariants_in_any_order_of_operations(deploy: Any) -> None:
    deploy(DOCUMENT)
    run_state_machine_as_test(
        Engine,
        settings=settings(
            max_examples=200 if FULL else 12,
            stateful_step_count=50 if FULL else 25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=not FULL,
            # no "explain" phase: its tracer slows a failing run a hundredfold (Python < 3.12)
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
        ),
    )
