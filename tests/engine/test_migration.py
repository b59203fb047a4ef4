"""Migration of runs: the MIGRATION command (move, cancel, end, the executor's checks) and the
position-based bulk migration (positions, preview, bounded apply, runs that moved on)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from workflows import definitions, operations, queries
from workflows.engine import history as history_log
from workflows.engine import migration
from workflows.engine.migration import apply as migration_apply
from workflows.exceptions import InvalidPayload, MigrationIllegalState
from workflows.models import (
    Command,
    DefinitionVersion,
    HistoryEntry,
    MigrationItem,
    MigrationRecord,
    Park,
    Run,
    Task,
    Timer,
)

REVISION_1 = """
definitionId: purchase-move
definitionVersion: 1
contract: {name: purchase-move.v1, signals: {goods-received: null}}
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
    title: "Review {{ state.route }}"
    assignment: {mode: user, value: alice}
    due: {after: P3D, next: done}
    decisions: [{name: approve, next: wait-goods}]
  - id: cool-off
    type: timer
    after: P1D
    next: done
  - id: wait-goods
    type: wait-signal
    signal: goods-received
    next: done
  - id: done
    type: complete
"""

# A fork whose runs wait at the join "gather" while their current step is the fork "split".
FORK = """
definitionId: fork-move
definitionVersion: {v}
contract: {{name: fork-move.v1, signals: {{a: null, b: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: split
steps:
  - {{id: split, type: fork, branches: [wa, wb], join: gather}}
  - {{id: wa, type: wait-signal, signal: a, next: gather}}
  - {{id: wb, type: wait-signal, signal: b, next: gather}}
  - {{id: gather, type: join, policy: all, next: done}}
  - {{id: done, type: complete}}
"""

# Revision 2 renames the review to manager-review (now bob's, with five days), lengthens the
# cool-off, and asks the state for a number.
REVISION_2 = (
    REVISION_1.replace("definitionVersion: 1", "definitionVersion: 2")
    .replace("to: review}", "to: manager-review}")
    .replace("id: review\n", "id: manager-review\n")
    .replace('title: "Review', 'title: "Manager review')
    .replace("value: alice}", "value: bob}")
    .replace("after: P3D", "after: P5D")
    .replace("after: P1D", "after: P2D")
)

STRICT_REVISION = REVISION_2.replace("definitionVersion: 2", "definitionVersion: 3").replace(
    "stateSchema: {type: object}",
    "stateSchema: {type: object, properties: {n: {type: integer}}, required: [route, n]}",
)

OTHER_CONTRACT = REVISION_2.replace("definitionVersion: 2", "definitionVersion: 4").replace(
    "name: purchase-move.v1", "name: purchase-move.v2"
)


@pytest.fixture
def revisions(deploy: Any) -> None:
    deploy(REVISION_1)
    deploy(REVISION_2, activate=False)


def start_at(route: str, drain: Any, version: int = 1, key: str = "") -> str:
    run_id = operations.start(
        definition_id="purchase-move", version=version, payload={"route": route}, business_key=key
    ).run_id
    drain()
    return run_id


def migrate(run_id: str, drain: Any, **kwargs: Any) -> Command:
    recorded = operations.migrate(run_id=run_id, **{"target_version": 2, **kwargs})
    drain()
    return Command.objects.get(pk=recorded.command_id)


def entries(run_id: str, type_: str) -> list[HistoryEntry]:
    return list(HistoryEntry.objects.filter(run_id=run_id, type=type_).order_by("seq"))


@pytest.mark.django_db(transaction=True)
class TestMove:
    def test_move_to_a_renamed_node_withdraws_the_approval_and_opens_one_for_the_new_assignee(
        self, revisions: None, drain: Any, demo_users: dict[str, Any]
    ) -> None:
        run_id = start_at("review", drain)
        assert [t.title for t in queries.tasks_for(demo_users["alice"])] == ["Review review"]

        command = migrate(run_id, drain, target_step="manager-review", actor=demo_users["admin"])

        assert command.status == "COMPLETE"
        assert not queries.tasks_for(demo_users["alice"]).exists()
        new_task = queries.tasks_for(demo_users["bob"]).get()
        assert (new_task.title, new_task.step) == ("Manager review review", "manager-review")
        assert Task.objects.get(run_id=run_id, step="review").status == "WITHDRAWN"
        run = Run.objects.get(pk=run_id)
        assert (run.version, run.current_step, run.status) == (2, "manager-review", "WAITING")
        assert run.plan_hash == DefinitionVersion.objects.get(definition_id="purchase-move", version=2).plan_hash
        old, new = Park.objects.filter(run_id=run_id).order_by("id")
        assert (old.left_how, old.moved_to_version, old.moved_to_node, old.moved_by) == (
            "moved",
            2,
            "manager-review",
            "admin",
        )
        assert (new.version, new.node, new.left_at) == (2, "manager-review", None)

    def test_move_logs_workflow_migrated_and_a_baseline_in_the_target_revision(
        self, revisions: None, drain: Any
    ) -> None:
        run_id = start_at("review", drain)
        migrate(run_id, drain, target_step="manager-review")

        migrated = entries(run_id, "WORKFLOW_MIGRATED")[0]
        assert migrated.payload["from"] == {"scope": "default", "version": 1, "step": "review"}
        assert migrated.payload["to"] == {"scope": "default", "version": 2, "step": "manager-review"}
        baseline = entries(run_id, "STATE_BASELINE")[-1]
        assert baseline.seq > migrated.seq and baseline.version == 2
        assert baseline.payload == {"state": {"route": "review"}}
        log = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values())
        assert history_log.replay(log) == Run.objects.get(pk=run_id).state
        assert [e.type for e in entries(run_id, "TASK_WITHDRAWN")] == ["TASK_WITHDRAWN"]

    def test_move_restarts_the_timer_from_the_target_delay(self, revisions: None, drain: Any) -> None:
        run_id = start_at("cool", drain)
        old = Timer.objects.get(run_id=run_id, status="SCHEDULED")

        migrate(run_id, drain, target_step="cool-off")

        old.refresh_from_db()
        new = Timer.objects.get(run_id=run_id, status="SCHEDULED")
        assert old.status == "CANCELLED"
        now = queries.database_now()
        assert timedelta(days=2) - timedelta(minutes=1) < new.fire_at - now <= timedelta(days=2)

    def test_move_without_a_node_enters_the_same_node_of_the_target(self, revisions: None, drain: Any) -> None:
        run_id = start_at("goods", drain)
        migrate(run_id, drain)
        run = Run.objects.get(pk=run_id)
        assert (run.version, run.current_step) == (2, "wait-goods")
        operations.signal(run_id=run_id, name="goods-received")
        drain()
        assert Run.objects.get(pk=run_id).status == "COMPLETED"


@pytest.mark.django_db(transaction=True)
class TestCancelAndEnd:
    def test_cancel_abandons_the_run_and_its_approval(
        self, revisions: None, drain: Any, demo_users: dict[str, Any]
    ) -> None:
        run_id = start_at("review", drain)
        command = migrate(run_id, drain, action="cancel", actor=demo_users["admin"])
        run = Run.objects.get(pk=run_id)
        assert (command.status, run.status, run.cancel_reason) == ("COMPLETE", "CANCELLED", "cancelled by migration")
        assert Task.objects.get(run_id=run_id).status == "CANCELLED"
        assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()
        park = Park.objects.get(run_id=run_id)
        assert (park.left_how, park.moved_by) == ("cancelled", "admin")
        assert not queries.tasks_for(demo_users["alice"]).exists()

    def test_end_completes_the_run_as_a_success_cut_short(self, revisions: None, drain: Any) -> None:
        run_id = start_at("cool", drain)
        command = migrate(run_id, drain, action="end")
        run = Run.objects.get(pk=run_id)
        assert (command.status, run.status, run.version) == ("COMPLETE", "COMPLETED", 1)
        assert entries(run_id, "WORKFLOW_COMPLETED")[0].payload == {"reason": "ended-by-migration"}
        assert Park.objects.get(run_id=run_id).left_how == "ended"
        assert not Timer.objects.filter(run_id=run_id, status="SCHEDULED").exists()


@pytest.mark.django_db(transaction=True)
class TestRejections:
    def assert_rejected_unchanged(self, run_id: str, command: Command, text: str) -> None:
        run = Run.objects.get(pk=run_id)
        assert command.status == "REJECTED"
        assert command.last_error == f"MIGRATION_REJECTED: {text}"
        assert (run.version, run.current_step, run.status) == (1, "review", "WAITING")
        assert Task.objects.get(run_id=run_id).status == "OPEN"
        assert Park.objects.get(run_id=run_id).left_at is None
        assert not entries(run_id, "WORKFLOW_MIGRATED")

    def test_a_deprecated_target_is_rejected(self, revisions: None, drain: Any) -> None:
        run_id = start_at("review", drain)
        definitions.deprecate(scope="default", definition_id="purchase-move", version=2)
        command = migrate(run_id, drain, target_step="manager-review")
        self.assert_rejected_unchanged(run_id, command, "the target revision is not available")

    def test_a_target_of_another_contract_is_rejected(self, deploy: Any, drain: Any) -> None:
        # one scope holds one contract per id: the other contract lives in the run's start scope
        deploy(OTHER_CONTRACT, scope="tenant", activate=False)
        deploy(REVISION_1)
        run_id = operations.start(
            definition_id="purchase-move", version=1, scope="tenant", payload={"route": "review"}
        ).run_id
        drain()
        assert Run.objects.get(pk=run_id).scope == "default"
        command = migrate(run_id, drain, target_version=4, target_scope="tenant", target_step="manager-review")
        self.assert_rejected_unchanged(run_id, command, "the target revision implements another contract")

    def test_a_state_the_target_schema_refuses_is_rejected_without_a_handler(
        self, deploy: Any, revisions: None, drain: Any
    ) -> None:
        deploy(STRICT_REVISION, activate=False)
        run_id = start_at("review", drain)
        command = migrate(run_id, drain, target_version=3, target_step="manager-review")
        self.assert_rejected_unchanged(
            run_id, command, "the state does not fit the target's state schema and no migration handler is registered"
        )

    def test_a_registered_handler_maps_the_state(self, deploy: Any, revisions: None, drain: Any) -> None:
        deploy(STRICT_REVISION, activate=False)
        operations.register_migration_handler(
            definition_id="purchase-move", from_version=1, to_version=3, fn=lambda state: {**state, "n": 7}
        )
        try:
            run_id = start_at("review", drain)
            command = migrate(run_id, drain, target_version=3, target_step="manager-review")
        finally:
            migration.unregister_migration_handler("purchase-move", 1, 3)
        run = Run.objects.get(pk=run_id)
        assert (command.status, run.version, run.state) == ("COMPLETE", 3, {"route": "review", "n": 7})
        log = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values())
        assert history_log.replay(log) == run.state

    def test_a_failing_handler_is_rejected_with_framework_text(self, deploy: Any, revisions: None, drain: Any) -> None:
        deploy(STRICT_REVISION, activate=False)

        def broken(state: Any) -> Any:
            raise ValueError("secret-value-42")

        operations.register_migration_handler(definition_id="purchase-move", from_version=1, to_version=3, fn=broken)
        try:
            run_id = start_at("review", drain)
            command = migrate(run_id, drain, target_version=3, target_step="manager-review")
        finally:
            migration.unregister_migration_handler("purchase-move", 1, 3)
        self.assert_rejected_unchanged(run_id, command, "the migration handler failed")
        assert not HistoryEntry.objects.filter(run_id=run_id, payload__icontains="secret-value-42").exists()

    def test_a_target_without_the_node_is_rejected(self, revisions: None, drain: Any) -> None:
        run_id = start_at("review", drain)
        command = migrate(run_id, drain)  # revision 2 has no node "review"
        self.assert_rejected_unchanged(run_id, command, "the target revision has no such node")

    def test_an_ended_run_is_refused_when_recorded(self, revisions: None, drain: Any) -> None:
        run_id = start_at("nowhere", drain)
        with pytest.raises(MigrationIllegalState):
            operations.migrate(run_id=run_id, target_version=2)

    def test_a_run_waiting_at_a_join_is_rejected(self, deploy: Any, drain: Any) -> None:
        deploy(FORK.format(v=1))
        deploy(FORK.format(v=2), activate=False)
        run_id = operations.start(definition_id="fork-move", payload={}).run_id
        drain()
        recorded = operations.migrate(run_id=run_id, target_version=2)
        drain()
        command = Command.objects.get(pk=recorded.command_id)
        assert (command.status, command.last_error) == ("REJECTED", "MIGRATION_REJECTED: the run has active branches")
        assert Run.objects.get(pk=run_id).version == 1


# --- the bulk migration -------------------------------------------------------------------------


def park_three_positions(drain: Any) -> dict[str, list[str]]:
    return {
        "review": [start_at("review", drain, key=f"PO-{i}") for i in range(3)],
        "cool-off": [start_at("cool", drain, key=f"CO-{i}") for i in range(2)],
        "wait-goods": [start_at("goods", drain, key=f"GO-{i}") for i in range(2)],
    }


def row(node: str, kind: str, action: str = "move", target_node: str = "", runs: Any = "all") -> dict[str, Any]:
    return {"node": node, "kind": kind, "action": action, "target_node": target_node, "runs": runs}


@pytest.mark.django_db(transaction=True)
class TestBulk:
    def test_positions_are_one_row_per_node_and_kind(self, revisions: None, drain: Any) -> None:
        park_three_positions(drain)
        found = {
            (p.node, p.kind): p.runs
            for p in queries.migration_positions(scope="default", definition_id="purchase-move", version=1)
        }
        assert found == {("review", "TASK"): 3, ("cool-off", "TIMER"): 2, ("wait-goods", "SIGNAL"): 2}
        assert queries.parked_by_version(definition_id="purchase-move") == {("default", 1): 7}
        rows, total = queries.runs_at_position(
            scope="default", definition_id="purchase-move", version=1, node="review", kind="TASK", search="po-1"
        )
        assert total == 1 and rows[0]["business_key"] == "PO-1"

    def test_an_untouched_dialog_changes_nothing(self, revisions: None, drain: Any) -> None:
        park_three_positions(drain)
        record = operations.migration_preview(
            scope="default",
            definition_id="purchase-move",
            source_version=1,
            target_version=2,
            rows=[row("review", "TASK", runs=[]), row("cool-off", "TIMER", runs=[])],
        )
        assert record is None
        assert not MigrationRecord.objects.exists()
        assert not Command.objects.filter(kind="MIGRATION").exists()

    def test_preview_apply_moves_cancels_and_ends_three_positions(
        self, revisions: None, drain: Any, demo_users: dict[str, Any]
    ) -> None:
        runs = park_three_positions(drain)
        picked = runs["review"][:2]
        record_id = operations.migration_preview(
            scope="default",
            definition_id="purchase-move",
            source_version=1,
            target_version=2,
            rows=[
                row("review", "TASK", target_node="manager-review", runs=picked),
                row("cool-off", "TIMER", action="cancel"),
                row("wait-goods", "SIGNAL", action="end"),
            ],
            actor=demo_users["admin"],
            reason="review moved to managers",
        )
        assert record_id is not None
        record = queries.migration_record(record_id=record_id)
        assert (record.total, record.status, record.created_by) == (6, "PREVIEWED", "admin")
        facts = {f["row"]: f for f in queries.migration_row_facts(record_id=record_id)}
        assert facts[0]["tasks"] == [{"mode": "user", "value": "alice", "count": 2}]
        assert facts[1]["timers"] == {"FIRE": 2}

        progress = operations.migration_apply(record_id=record_id, actor=demo_users["admin"])
        # the moves are made by Apply itself; the cancels and ends run as MIGRATION commands
        assert (progress.counts.get("MOVED"), progress.in_flight) == (2, 4)
        drain()
        progress = operations.migration_progress(record_id=record_id)
        assert (progress.status, progress.counts) == ("DONE", {"MOVED": 2, "CANCELLED": 2, "ENDED": 2})
        assert sorted(str(t.run_id) for t in queries.tasks_for(demo_users["bob"])) == sorted(picked)
        assert queries.tasks_for(demo_users["alice"]).count() == 1  # the run nobody picked
        assert {Run.objects.get(pk=r).status for r in runs["cool-off"]} == {"CANCELLED"}
        assert {Run.objects.get(pk=r).status for r in runs["wait-goods"]} == {"COMPLETED"}
        assert set(Park.objects.filter(migration_id=record_id).values_list("left_how", flat=True)) == {
            "moved",
            "cancelled",
            "ended",
        }

    def test_apply_is_bounded_and_continues(self, revisions: None, drain: Any, settings: Any) -> None:
        from workflows import conf

        settings.WORKFLOWS = {"MIGRATE": {"APPLY_BATCH": 2}}
        conf.reload()
        try:
            park_three_positions(drain)
            record_id = operations.migration_preview(
                scope="default",
                definition_id="purchase-move",
                source_version=1,
                target_version=2,
                rows=[row("review", "TASK", target_node="manager-review")],
            )
            first = operations.migration_apply(record_id=record_id)
            assert (first.left, first.counts.get("MOVED"), first.status) == (1, 2, "APPLYING")
            second = operations.migration_apply(record_id=record_id)
            assert (second.left, second.in_flight, second.status) == (0, 0, "DONE")
            assert operations.migration_progress(record_id=record_id).counts == {"MOVED": 3}
        finally:
            settings.WORKFLOWS = {}
            conf.reload()

    def test_a_run_an_approver_moved_on_after_the_preview_is_reported_not_forced(
        self, revisions: None, drain: Any
    ) -> None:
        runs = park_three_positions(drain)
        record_id = operations.migration_preview(
            scope="default",
            definition_id="purchase-move",
            source_version=1,
            target_version=2,
            rows=[row("review", "TASK", target_node="manager-review")],
        )
        approved = runs["review"][0]
        operations.complete_task(task_id=Task.objects.get(run_id=approved, status="OPEN").id, decision="approve")
        drain()  # the approval moves the run on to wait-goods before Apply

        operations.migration_apply(record_id=record_id)
        drain()
        item = MigrationItem.objects.get(record_id=record_id, run_id=approved)
        assert (item.status, item.detail, item.command_id) == ("MOVED_ON", "MOVED_ON", None)
        run = Run.objects.get(pk=approved)
        assert (run.version, run.current_step) == (1, "wait-goods")
        assert operations.migration_progress(record_id=record_id).counts == {"MOVED": 2, "MOVED_ON": 1}

    def test_a_run_that_moved_on_after_apply_recorded_it_is_left_alone_by_the_handler(
        self, revisions: None, drain: Any
    ) -> None:
        runs = park_three_positions(drain)
        approved = runs["review"][0]
        record_id = operations.migration_preview(
            scope="default",
            definition_id="purchase-move",
            source_version=1,
            target_version=2,
            rows=[row("review", "TASK", target_node="manager-review", runs=[approved])],
        )
        # the approver's decision is recorded first, so it is applied first
        operations.complete_task(task_id=Task.objects.get(run_id=approved, status="OPEN").id, decision="approve")
        operations.migration_apply(record_id=record_id)
        drain()
        item = MigrationItem.objects.get(record_id=record_id, run_id=approved)
        command = Command.objects.get(pk=item.command_id)
        assert (item.status, command.status) == ("MOVED_ON", "STALE")
        assert command.last_error.startswith("MOVED_ON")
        assert Run.objects.get(pk=approved).current_step == "wait-goods"

    def test_a_large_batch_needs_its_size_typed_back(self, revisions: None, drain: Any, monkeypatch: Any) -> None:
        monkeypatch.setattr(migration_apply, "LARGE_BATCH", 2)
        park_three_positions(drain)
        record_id = operations.migration_preview(
            scope="default",
            definition_id="purchase-move",
            source_version=1,
            target_version=2,
            rows=[row("review", "TASK", action="end")],
        )
        with pytest.raises(InvalidPayload):
            operations.migration_apply(record_id=record_id, confirm=2)
        assert not Command.objects.filter(kind="MIGRATION").exists()
        assert operations.migration_apply(record_id=record_id, confirm=3).in_flight == 3

    def test_preview_refuses_an_unknown_target_node_value_free(self, revisions: None, drain: Any) -> None:
        park_three_positions(drain)
        with pytest.raises(InvalidPayload) as caught:
            operations.migration_preview(
                scope="default",
                definition_id="purchase-move",
                source_version=1,
                target_version=2,
                rows=[row("review", "TASK", target_node="<script>nope")],
            )
        assert "<script>" not in str(caught.value.message)
        assert caught.value.violations[0].pointer == "/rows/0/target_node"


@pytest.mark.django_db(transaction=True)
class TestConcurrency:
    def test_a_run_busy_at_apply_is_left_for_the_next_apply_never_waited_for(self, revisions: None, drain: Any) -> None:
        # An approver's transaction holds one run's lock while Apply runs: Apply must neither
        # wait for it (it holds the other runs' locks) nor force it; the run stays selected.
        import threading

        from django.db import connection, transaction

        runs = park_three_positions(drain)
        record_id = operations.migration_preview(
            scope="default",
            definition_id="purchase-move",
            source_version=1,
            target_version=2,
            rows=[row("review", "TASK", target_node="manager-review")],
        )
        busy = runs["review"][1]
        locked, release = threading.Event(), threading.Event()

        def hold() -> None:
            try:
                with transaction.atomic(), connection.cursor() as cur:
                    cur.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE", [busy])
                    locked.set()
                    release.wait(10)
            finally:
                connection.close()

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert locked.wait(10)
            first = operations.migration_apply(record_id=record_id)
            assert (first.left, first.counts.get("MOVED")) == (1, 2)
        finally:
            release.set()
            holder.join(10)
        assert not holder.is_alive()
        second = operations.migration_apply(record_id=record_id)
        assert (second.left, second.status) == (0, "DONE")
        assert operations.migration_progress(record_id=record_id).counts == {"MOVED": 3}

    def test_a_node_that_cannot_build_the_target_plan_defers_the_migration(
        self, revisions: None, drain: Any, monkeypatch: Any
    ) -> None:
        from workflows.definitions import cache
        from workflows.engine import executor
        from workflows.exceptions import DefinitionError

        run_id = start_at("review", drain)
        operations.migrate(run_id=run_id, target_version=2, target_step="manager-review")
        real = cache.get_plan

        def without_revision_2(**key: Any) -> Any:
            if key.get("version") == 2:
                raise DefinitionError("this node cannot build revision 2")
            return real(**key)

        monkeypatch.setattr(cache, "get_plan", without_revision_2)
        head = executor.peek(10, run_id)[0]
        assert executor.process(head) == "DEFERRED"
        command = Command.objects.get(run_id=run_id, kind="MIGRATION")
        assert (command.status, command.attempts) == ("DEFERRED", 0)
        assert Run.objects.get(pk=run_id).version == 1


@pytest.mark.django_db(transaction=True)
def test_runs_at_a_join_are_counted_at_the_join_and_can_be_ended(deploy: Any, drain: Any) -> None:
    deploy(FORK.format(v=1))
    deploy(FORK.format(v=2), activate=False)
    run_id = operations.start(definition_id="fork-move", payload={}).run_id
    drain()
    positions = queries.migration_positions(scope="default", definition_id="fork-move", version=1)
    assert [(p.node, p.kind, p.runs) for p in positions] == [("gather", "JOIN", 1)]  # branch waits are not rows
    record_id = operations.migration_preview(
        scope="default",
        definition_id="fork-move",
        source_version=1,
        target_version=2,
        rows=[row("gather", "JOIN", action="end")],
    )
    operations.migration_apply(record_id=record_id)
    drain()
    assert operations.migration_progress(record_id=record_id).counts == {"ENDED": 1}
    run = Run.objects.get(pk=run_id)
    assert run.status == "COMPLETED"
    assert not Park.objects.filter(run_id=run_id, left_at__isnull=True).exists()


# --- the position counts the dialog reads ---------------------------------------------------------


def counted_from_parks(version: int) -> list[tuple[str, str, int]]:
    """The positions as a full scan of the open main-path parks finds them."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT node, kind, count(*) FROM workflow_parks WHERE left_at IS NULL AND branch_id = '' "
            "AND definition_id = 'purchase-move' AND version = %s GROUP BY node, kind ORDER BY node, kind",
            [version],
        )
        return [(str(n), str(k), int(c)) for n, k, c in cur.fetchall()]


def counted(version: int) -> list[tuple[str, str, int]]:
    return [
        (p.node, p.kind, p.runs)
        for p in migration.positions(scope="default", definition_id="purchase-move", version=version)
    ]


@pytest.mark.django_db(transaction=True)
def test_position_counts_follow_every_park_opened_and_closed(revisions: None, drain: Any) -> None:
    parked = park_three_positions(drain)
    expected = [("cool-off", "TIMER", 2), ("review", "TASK", 3), ("wait-goods", "SIGNAL", 2)]
    assert counted(1) == counted_from_parks(1) == expected
    oldest = migration.positions(scope="default", definition_id="purchase-move", version=1)[1].oldest
    assert oldest == Park.objects.filter(run_id=parked["review"][0], left_at__isnull=True).get().since
    # a decision, a signal, a cancel, a move and a deleted run each take a run off its position
    task = Task.objects.get(run_id=parked["review"][0], status="OPEN")
    operations.complete_task(task_id=task.id, decision="approve")
    drain()
    operations.signal(run_id=parked["wait-goods"][1], name="goods-received")
    operations.cancel(run_id=parked["cool-off"][0], reason="not needed")
    migrate(parked["review"][1], drain, target_step="manager-review")
    drain()
    Run.objects.filter(pk=parked["review"][2]).delete()
    assert counted(1) == counted_from_parks(1)
    assert counted(2) == counted_from_parks(2) != []
    assert migration.parked_by_version(definition_id="purchase-move") == {
        ("default", v): sum(n for _, _, n in counted_from_parks(v)) for v in (1, 2) if counted_from_parks(v)
    }


@pytest.fixture
def reserve_service() -> Any:
    from workflows.definitions import catalogs

    catalogs.callbacks.register("test.reserve", category="service")(lambda payload, headers: None)
    yield
    catalogs.callbacks.unregister("test.reserve", "service")


def test_the_preview_says_what_entering_a_target_node_does_by_its_step_type(deploy: Any, reserve_service: None) -> None:
    """Effects and run ends come from the step-type registry (``StepType.effect`` /
    ``terminal``), not from a list of plan classes in the preview."""
    from tests.engine import documents

    deploy(documents.ORDER_SIGNAL)

    def facts(node: str) -> dict[str, Any]:
        return queries.migration_target_facts(scope="default", definition_id="order-signal", version=1, node=node)

    assert facts("reserve") == {"type": "service", "node": "reserve", "effect": True}
    assert facts("done") == {"type": "complete", "node": "done", "terminal": True}
    assert facts("expired") == {"type": "fail", "node": "expired", "terminal": True}
    waiting = facts("wait-payment")
    assert waiting["signal"] == "paid" and "effect" not in waiting and "terminal" not in waiting
    assert facts("no-such-node") == {"type": "missing"}
