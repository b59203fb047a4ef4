"""Set-based moves: Apply moves a batch of runs itself, and what it writes is exactly what the
MIGRATION segment writes for one run (history, run row, parks, approvals, timers, commands,
notices), so the run viewer cannot tell the two apart."""

from __future__ import annotations

from typing import Any

import pytest

from workflows import operations, queries
from workflows.engine.migration import bulk as migration_bulk
from workflows.models import Command, HistoryEntry, MigrationItem, Park, Run, Task, Timer
from workflows.models.commands import OutboxIntent

REVISION_1 = """
definitionId: bulk-move
definitionVersion: 1
contract: {name: bulk-move.v1, signals: {goods-received: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object, properties: {route: {type: string}}, required: [route]}
initialStep: route
steps:
  - id: route
    type: decision
    routes:
      - {when: "state.route == 'review'", to: review}
      - {when: "state.route == 'cool'", to: cool-off}
      - {when: "state.route == 'goods'", to: wait-goods}
    default: done
  - id: review
    type: human-task
    title: "Review {{ state.route }} for {{ state.customer.name }}"
    assignment: {mode: user, value: alice}
    due: {after: P3D, next: done}
    decisions: [{name: approve, next: done}]
  - id: cool-off
    type: timer
    after: P1D
    next: done
  - id: wait-goods
    type: wait-signal
    signal: goods-received
    timeout: {after: P7D, next: done}
    next: done
  - id: done
    type: complete
"""

# Revision 2: the review is the manager's (bob, five days, a reminder every four hours, the
# title reads a nested field and a number), the cool-off is two days.
REVISION_2 = (
    REVISION_1.replace("definitionVersion: 1", "definitionVersion: 2")
    .replace("id: review\n", "id: manager-review\n")
    .replace("to: review}", "to: manager-review}")
    .replace('title: "Review {{ state.route }}', 'title: "Manager review {{ state.amount }} {{ state.route }}')
    .replace("value: alice}", "value: bob}\n    reminders: {every: PT4H}")
    .replace("after: P3D", "after: P5D")
    .replace("after: P1D", "after: P2D")
)


@pytest.fixture
def revisions(deploy: Any) -> None:
    deploy(REVISION_1)
    deploy(REVISION_2, activate=False)


def start(route: str, drain: Any, key: str) -> str:
    run_id = operations.start(
        definition_id="bulk-move",
        payload={"route": route, "amount": 1250, "customer": {"name": "Acme"}},
        business_key=key,
    ).run_id
    drain()
    return run_id


def apply(
    node: str, kind: str, target: str, runs: list[str], actor: Any, *, bulk: bool, monkeypatch: Any, version: int = 2
) -> Any:
    record_id = operations.migration_preview(
        scope="default",
        definition_id="bulk-move",
        source_version=1,
        target_version=version,
        rows=[{"node": node, "kind": kind, "action": "move", "target_node": target, "runs": runs}],
        actor=actor,
    )
    with monkeypatch.context() as m:
        if not bulk:  # every run through its MIGRATION segment
            m.setattr(migration_bulk, "move", lambda rec, chosen, actor: ([], chosen))
        return operations.migration_apply(record_id=record_id, actor=actor)


def _norm(value: Any, names: dict[str, str]) -> Any:
    """Ids (tasks, migration records) replaced by the order they first appear in."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("task", "migration", "park", "timers", "fire", "timeout") and v is not None:
                out[k] = _norm_id(v, names)
            else:
                out[k] = _norm(v, names)
        return out
    if isinstance(value, list):
        return [_norm(v, names) for v in value]
    return value


def _norm_id(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, list):
        return [_norm_id(v, names) for v in value]
    return names.setdefault(str(value), f"#{len(names)}")


def snapshot(run_id: str) -> dict[str, Any]:
    """Everything a migration writes about a run, with ids and clock readings left out."""
    names: dict[str, str] = {}
    run = Run.objects.get(pk=run_id)
    kinds = dict(Command.objects.filter(run_id=run_id).values_list("id", "kind"))
    return {
        "run": (
            run.status,
            run.current_step,
            run.scope,
            run.version,
            run.plan_hash,
            run.state,
            run.state_version,
            run.next_seq,
            run.history_seq,
            run.open_signals,
            _norm(run.wait, names),
        ),
        "history": [
            (
                e.seq,
                e.type,
                e.step,
                e.outcome,
                kinds.get(e.command_id),
                e.scope,
                e.version,
                e.plan_hash,
                e.state_version_before,
                e.state_version_after,
                e.patch,
                _norm(e.payload, names),
                e.actor_kind,
                e.actor_id,
                e.executor_id != "",
            )
            for e in HistoryEntry.objects.filter(run_id=run_id).order_by("seq")
        ],
        "commands": list(
            Command.objects.filter(run_id=run_id)
            .order_by("seq")
            .values_list("seq", "kind", "timer_kind", "status", "last_error", "attempts", "actor_kind", "actor_id")
        ),
        "tasks": [
            (
                t.step,
                t.status,
                t.title,
                t.assignment_mode,
                t.assignment_value,
                t.decisions,
                t.reminder_every_seconds,
                t.due_at is not None,
                t.closed_at is not None,
            )
            for t in Task.objects.filter(run_id=run_id).order_by("created_at", "step")
        ],
        "timers": [
            (t.kind, t.status, t.step, t.interval_seconds, t.task_id is not None)
            for t in Timer.objects.filter(run_id=run_id).order_by("id")
        ],
        "parks": [
            (
                k.node,
                k.kind,
                k.version,
                k.left_how,
                k.moved_to_node,
                k.moved_to_version,
                k.moved_by,
                k.left_at is None,
                k.migration_id is None,
            )
            for k in Park.objects.filter(run_id=run_id).order_by("id")
        ],
        "notices": sorted(
            OutboxIntent.objects.filter(run_id=run_id).values_list("kind", "status", "payload", "attempts")
        ),
    }


@pytest.mark.django_db(transaction=True)
class TestSameAsTheSegment:
    @pytest.mark.parametrize(
        ("route", "node", "kind", "target"),
        [
            ("review", "review", "TASK", "manager-review"),  # approval to a renamed approval
            ("cool", "cool-off", "TIMER", "cool-off"),  # timer to the same timer, new delay
            ("goods", "wait-goods", "SIGNAL", "manager-review"),  # a signal wait to an approval
            ("review", "review", "TASK", "cool-off"),  # an approval to a timer
        ],
    )
    def test_a_set_based_move_writes_what_the_segment_writes(
        self,
        revisions: None,
        drain: Any,
        demo_users: dict[str, Any],
        monkeypatch: Any,
        route: str,
        node: str,
        kind: str,
        target: str,
    ) -> None:
        one_by_one = start(route, drain, "A-1")
        together = [start(route, drain, f"B-{i}") for i in range(3)]
        admin = demo_users["admin"]

        applied = apply(node, kind, target, [one_by_one], admin, bulk=False, monkeypatch=monkeypatch)
        assert applied.in_flight == 1  # a MIGRATION command, left to the executor
        drain()
        applied = apply(node, kind, target, together, admin, bulk=True, monkeypatch=monkeypatch)
        assert (applied.status, applied.counts) == ("DONE", {"MOVED": 3})  # moved by Apply itself
        drain()  # nothing of the moves is left to run (the notices go out)

        expected = snapshot(one_by_one)
        assert expected["run"][:4] == ("WAITING", target, "default", 2)
        assert [h[1] for h in expected["history"]].count("WORKFLOW_MIGRATED") == 1
        for run_id in together:
            assert snapshot(run_id) == expected
        items = MigrationItem.objects.filter(run_id__in=together)
        assert {(i.status, Command.objects.get(pk=i.command_id).status) for i in items} == {("MOVED", "COMPLETE")}

    def test_the_approver_sees_the_moved_approvals_at_once(
        self, revisions: None, drain: Any, demo_users: dict[str, Any], monkeypatch: Any
    ) -> None:
        runs = [start("review", drain, f"PO-{i}") for i in range(4)]
        apply("review", "TASK", "manager-review", runs[:3], demo_users["admin"], bulk=True, monkeypatch=monkeypatch)
        assert sorted(str(t.run_id) for t in queries.tasks_for(demo_users["bob"])) == sorted(runs[:3])
        assert [str(t.run_id) for t in queries.tasks_for(demo_users["alice"])] == [runs[3]]
        assert [t.title for t in queries.tasks_for(demo_users["bob"])] == ["Manager review 1250 review for Acme"] * 3


@pytest.mark.django_db(transaction=True)
class TestLeftToTheSegment:
    def test_a_run_with_a_decision_ahead_in_its_queue_gets_a_command(
        self, revisions: None, drain: Any, demo_users: dict[str, Any], monkeypatch: Any
    ) -> None:
        approved, other = start("review", drain, "PO-1"), start("review", drain, "PO-2")
        operations.complete_task(task_id=Task.objects.get(run_id=approved, status="OPEN").id, decision="approve")
        applied = apply(
            "review",
            "TASK",
            "manager-review",
            [approved, other],
            demo_users["admin"],
            bulk=True,
            monkeypatch=monkeypatch,
        )
        assert (applied.counts.get("MOVED"), applied.in_flight) == (1, 1)
        drain()
        assert operations.migration_progress(record_id=applied.record_id).counts == {"MOVED": 1, "MOVED_ON": 1}
        assert MigrationItem.objects.get(run_id=approved).status == "MOVED_ON"
        assert Run.objects.get(pk=approved).status == "COMPLETED"

    def test_a_state_the_target_refuses_is_rejected_by_the_segment_with_its_text(
        self, revisions: None, deploy: Any, drain: Any, demo_users: dict[str, Any], monkeypatch: Any
    ) -> None:
        strict = REVISION_2.replace("definitionVersion: 2", "definitionVersion: 3")
        deploy(
            strict.replace("stateSchema: {type: object}", "stateSchema: {type: object, required: [missing]}"),
            activate=False,
        )
        run_id = start("review", drain, "PO-1")
        applied = apply(
            "review",
            "TASK",
            "manager-review",
            [run_id],
            demo_users["admin"],
            bulk=True,
            monkeypatch=monkeypatch,
            version=3,
        )
        assert applied.in_flight == 1
        drain()
        item = MigrationItem.objects.get(run_id=run_id)
        assert item.status == "REJECTED"
        assert Command.objects.get(pk=item.command_id).last_error.startswith("MIGRATION_REJECTED")
        assert Run.objects.get(pk=run_id).version == 1
