"""The MIGRATION command's segment: one run moved, cancelled or ended, under its execution lock.

``apply_migration`` runs in the segment of a MIGRATION command. Its target (written by
``recording.migrate`` or by the bulk Apply) is ``{version, scope, step, action, migration,
expected_step, expected_version}``:

- ``expected_step`` (set by the bulk apply): the position the run was selected at. A run that
  an approver, a timer or another writer moved on since is settled STALE (``MOVED_ON``) and
  left alone — never forced.
- the checks, in a savepoint, each rejecting with ``MIGRATION_REJECTED`` and fixed framework
  text (never a handler's text, a state value or a class name), the run unchanged: a failed
  run; a run that is not at a wait; a target scope outside the run's scopes; for a move also
  active branches (a run waiting at a join), a target of another contract, a target row that
  is not AVAILABLE or is marked failing, a target without the node, a state the target's state
  schema refuses with no registered handler, and a failing handler.
- **move** leaves the wait (its park closed ``moved`` with where to, who and which migration;
  its approval withdrawn; its timers disarmed), re-pins the run to the target revision, logs
  WORKFLOW_MIGRATED and a STATE_BASELINE, rejects the parked signals the target never waits
  for, and enters the target node fresh through the ordinary nodes (a new approval with the
  target's assignee, title and deadline; timers from the target's delays);
- **cancel** gives the run up (CANCELLED with the cancel teardown);
- **end** finishes it as a success cut short (COMPLETED, reason ``ended-by-migration``).
  Neither replays a node's effects.

The registered state handlers live here as well: the set-based moves (``bulk``) leave a run
that has one to this segment. Statements: ``engine/sql/migration_handler.sql``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from workflows.definitions.plan import Plan
from workflows.engine import db, driver, locks, observers, sql, teardown, waits
from workflows.engine.actors import Actor
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.outbox import digest
from workflows.engine.rows import CommandRow, RunRow
from workflows.engine.settlement import Settle, completed, received
from workflows.exceptions import WorkflowError
from workflows.models import ENDED_STATUSES, CommandKind, CommandStatus, MigrationItemStatus, RunStatus

log = logging.getLogger("workflows.engine")
SQL = sql.load("migration_handler")

ACTIONS = ("move", "cancel", "end")
ENDED_REASON = "ended-by-migration"
CANCEL_REASON = "cancelled by migration"

StateHandler = Callable[[Any], Any]
_handlers: dict[tuple[str, int, int], StateHandler] = {}


def register_migration_handler(definition_id: str, from_version: int, to_version: int, fn: StateHandler) -> None:
    """Map a run's state from one revision's state schema to another's.

    ``fn(state) -> state`` gets a copy of the state; what it returns must be valid against the
    target's state schema. A handler is used for every move between the two revisions; a
    handler that raises rejects the migration (its text is never stored).
    """
    _handlers[(definition_id, int(from_version), int(to_version))] = fn


def unregister_migration_handler(definition_id: str, from_version: int, to_version: int) -> None:
    _handlers.pop((definition_id, int(from_version), int(to_version)), None)


def handler_for(definition_id: str, from_version: int, to_version: int) -> StateHandler | None:
    return _handlers.get((definition_id, int(from_version), int(to_version)))


# --- the MIGRATION command ------------------------------------------------------------------


class _Rejected(Exception):
    """A check refused the migration; ``text`` is fixed framework text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def actor_label(actor: Actor) -> str:
    """Who sent a run somewhere, as the park and the record show it (never a payload value)."""
    return (actor.id or actor.kind.lower() or "none")[:255]


def apply_migration(drive: Drive, cmd: CommandRow) -> Settle:
    """The MIGRATION command's segment (``segment.APPLY``)."""
    run = drive.run
    target = cmd["target"] or {}
    action = str(target.get("action") or "move")
    migration_id = target.get("migration")
    received(drive, cmd)
    expected_step = target.get("expected_step")
    expected_version = target.get("expected_version")
    if expected_step is not None and (
        run["status"] != RunStatus.WAITING
        or parked_at(run) != expected_step
        or (expected_version is not None and int(run["version"]) != int(expected_version))
    ):
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="MOVED_ON")
        _settle_item(migration_id, run["id"], MigrationItemStatus.MOVED_ON, "MOVED_ON", cmd["id"])
        return Settle(CommandStatus.STALE, "MOVED_ON: the run has moved on since it was selected")
    try:
        with drive.savepoint():
            outcome = _apply(drive, cmd, target, action)
    except _Rejected as rejected:
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="MIGRATION_REJECTED")
        _settle_item(migration_id, run["id"], MigrationItemStatus.REJECTED, "MIGRATION_REJECTED", cmd["id"])
        return Settle(CommandStatus.REJECTED, f"MIGRATION_REJECTED: {rejected.text}")
    except StepLimitExceeded:
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="STEP_LIMIT")
        _settle_item(migration_id, run["id"], MigrationItemStatus.REJECTED, "STEP_LIMIT", cmd["id"])
        return Settle(CommandStatus.REJECTED, "STEP_LIMIT: the segment ran more nodes than maxStepsPerSegment")
    except (DeterministicFailure, WorkflowError):
        # the target node could not be entered (an expression, an assignment, a call refused):
        # the savepoint took every write back, the run stays where it was
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="MIGRATION_REJECTED")
        _settle_item(migration_id, run["id"], MigrationItemStatus.REJECTED, "TARGET_NOT_ENTERED", cmd["id"])
        return Settle(CommandStatus.REJECTED, "MIGRATION_REJECTED: the target node could not be entered")
    if action == "move":
        driver.after_drive(drive, outcome)  # the item was marked MOVED with the park it closed
    else:
        _settle_item(
            migration_id,
            run["id"],
            {"cancel": MigrationItemStatus.CANCELLED, "end": MigrationItemStatus.ENDED}[action],
            "",
            cmd["id"],
        )
    return completed(drive, cmd)


def _apply(drive: Drive, cmd: CommandRow, target: dict[str, Any], action: str) -> Any:
    run = drive.run
    if action not in ACTIONS:
        raise _Rejected("the action is not move, cancel or end")
    if run["status"] == RunStatus.FAILED:
        raise _Rejected("the run has failed")
    if run["status"] != RunStatus.WAITING:
        raise _Rejected("the run is not at a wait")
    target_scope = str(target.get("scope") or run["scope"])
    if target_scope not in (run["scope"], run["start_scope"], "default"):
        raise _Rejected("target scope not admitted")
    if action == "cancel":
        _cancel(drive, cmd, target)
        return None
    if action == "end":
        _end(drive, cmd, target)
        return None
    return _move(drive, cmd, target, target_scope)


def parked_at(run: RunRow) -> str:
    """The node of the run's main-path park: its wait's step (a run at a join waits at the
    join while its current step is the fork), else its current step."""
    wait = run.get("wait")
    return str((wait or {}).get("step") or run.get("current_step") or "")


def origin_of(run: RunRow) -> dict[str, Any]:
    return {"scope": run["scope"], "version": int(run["version"]), "step": parked_at(run)}


def _move(drive: Drive, cmd: CommandRow, target: dict[str, Any], target_scope: str) -> Any:
    run = drive.run
    wait = run["wait"] or {}
    if wait.get("kind") == "join":
        raise _Rejected("the run has active branches")
    try:
        target_version = int(target.get("version"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _Rejected("the target revision is not named") from None
    target_plan = _target_plan(target_scope, run["definition_id"], target_version)
    source_plan = drive.plan
    assert source_plan is not None
    if target_plan.contract.name != source_plan.contract.name:
        raise _Rejected("the target revision implements another contract")
    step = str(target.get("step") or parked_at(run) or "")
    if step not in target_plan.steps:
        raise _Rejected("the target revision has no such node")
    new_state = _mapped_state(run, target_plan, target_version)

    origin = origin_of(run)
    migration_id = target.get("migration")
    row = db.fetchone(
        SQL.leave_for_target,
        {
            "run": run["id"],
            "scope": target_scope,
            "definition": run["definition_id"],
            "version": target_version,
            "node": step,
            "by": actor_label(drive.actor),
            "migration": migration_id,
            "park": wait.get("park"),
            "command": cmd["id"],
        },  # type: ignore[arg-type]  # named parameters
        prepared=True,
    )
    assert row is not None  # the statement always answers one row
    if row[0] is False:
        raise _Rejected("the run has active branches")
    if not row[1]:
        raise _Rejected("the target revision is not available")
    for t in row[2] or []:
        drive.history.add(
            "TASK_WITHDRAWN",
            step=t["step"],
            command_id=drive.command_id,
            actor=drive.actor,
            payload={"task": str(t["id"]), "reason": "moved"},
        )
    wait["park"] = None  # closed above with where the run went; leaving must not close it again
    if wait.get("kind") == "call" and wait.get("child"):
        # the called run was started by the node being left; the target node starts its own
        child = locks.lock_called_run(wait["child"], executor=bool(drive.executor_id))
        if child["status"] not in ENDED_STATUSES:
            teardown.cancel_locked(child, actor=drive.actor, reason="caller migrated", executor_id=drive.executor_id)
    waits.leave(drive, "moved")
    source_pointers = drive.history.pointers()  # redaction: the source covers everything so far

    # re-pin: the run, its decision log and its plan now belong to the target revision
    run["scope"], run["version"], run["plan_hash"] = target_scope, target_version, target_plan.plan_hash
    drive.plan = target_plan
    drive.history.scope, drive.history.version, drive.history.plan_hash = (
        target_scope,
        target_version,
        target_plan.plan_hash,
    )
    drive.history.add(
        "WORKFLOW_MIGRATED",
        step=step,
        command_id=cmd["id"],
        actor=drive.actor,
        payload={
            "action": "move",
            "from": origin,
            "to": {"scope": target_scope, "version": target_version, "step": step},
            "migration": migration_id,
        },
    )
    if new_state is not run["state"]:
        # the handler's mapping is the migration's own decision (written before its baseline);
        # its patch is redacted with the pointers of both revisions
        key = (run["definition_id"], target_version)
        target_pointers = drive.history.pointers()
        drive.history._pointers[key] = tuple(dict.fromkeys((*source_pointers, *target_pointers)))
        try:
            drive.decide(step=step, outcome="migrated-state", new_state=new_state, change=True)
        finally:
            drive.history._pointers[key] = target_pointers
    drive.history.baseline(
        run["state"], version=int(run["state_version"]), command_id=cmd["id"], actor=drive.actor, step=step
    )
    _reject_undeclared_parked(drive, target_plan)
    # an approval the target reopens for the same assignees sends no "New task" (a digest at
    # most); only while this move drives the run (a segment may go on with other commands)
    drive.moved = digest.moved(
        row[2] or [],
        digest=row[4],
        migration_id=migration_id,
        definition_id=run["definition_id"],
        version=target_version,
    )
    try:
        return driver.run_from(drive, step)
    finally:
        drive.moved = None


def _target_plan(scope: str, definition_id: str, version: int) -> Plan:
    """The target plan (the executor made it resident before the claim)."""
    from workflows.definitions import cache

    try:
        return cache.get_plan(scope=scope, definition_id=definition_id, version=version)
    except WorkflowError:
        raise _Rejected("the target revision is not available") from None


def _mapped_state(run: RunRow, target_plan: Plan, target_version: int) -> Any:
    from workflows.definitions import schemas

    state = run["state"]
    fn = handler_for(run["definition_id"], int(run["version"]), target_version)
    mapped = state
    if fn is not None:
        try:
            mapped = fn(copy.deepcopy(state))
        except Exception:  # noqa: BLE001  (a handler's text, type and values never reach the log)
            log.warning(
                "migration handler of %s v%s → v%s failed", run["definition_id"], run["version"], target_version
            )
            raise _Rejected("the migration handler failed") from None
    if target_plan.state_schema and schemas.validate(target_plan.state_schema, mapped):
        if fn is None:
            raise _Rejected("the state does not fit the target's state schema and no migration handler is registered")
        raise _Rejected("the migration handler gave a state the target's state schema refuses")
    return state if fn is None else mapped


def _reject_undeclared_parked(drive: Drive, target_plan: Plan) -> None:
    if not int(drive.run["open_signals"] or 0):
        return  # a parked signal holds an open-signal slot: none is parked
    rows = db.fetchdicts(
        SQL.parked_signals,
        [drive.run["id"]],
    )
    refused = [r["id"] for r in rows if not target_plan.waits_for(str((r["target"] or {}).get("name", "")))]
    if not refused:
        return
    db.execute(
        SQL.reject_parked_signals,
        [refused],
    )
    for command_id in refused:
        drive.history.add("COMMAND_REJECTED", command_id=command_id, actor=drive.actor, outcome="SIGNAL_REJECTED")
    observers.settled_on_commit(drive.run["id"], [(c, CommandKind.SIGNAL, CommandStatus.REJECTED) for c in refused])
    drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - len(refused))


def _cancel(drive: Drive, cmd: CommandRow, target: dict[str, Any]) -> None:
    """The cancel teardown inside the segment (``teardown.cancel_in_segment``): every other
    open command, timers, tasks, branches, called runs — and a caller waiting on this run at a
    call, resumed through the outbox to be cancelled in turn."""
    run = drive.run
    wait = run["wait"] or {}
    waits.close_park(wait.get("park"), "cancelled", by=actor_label(drive.actor), migration_id=target.get("migration"))
    drive.history.add(
        "WORKFLOW_MIGRATED",
        step=parked_at(run),
        command_id=cmd["id"],
        actor=drive.actor,
        payload={"action": "cancel", "from": origin_of(run), "to": None, "migration": target.get("migration")},
    )
    teardown.cancel_in_segment(drive, command_id=cmd["id"], reason=CANCEL_REASON)


def _end(drive: Drive, cmd: CommandRow, target: dict[str, Any]) -> None:
    run = drive.run
    wait = run["wait"] or {}
    step = parked_at(run)
    waits.close_park(wait.get("park"), "ended", by=actor_label(drive.actor), migration_id=target.get("migration"))
    drive.history.add(
        "WORKFLOW_MIGRATED",
        step=step,
        command_id=cmd["id"],
        actor=drive.actor,
        payload={"action": "end", "from": origin_of(run), "to": None, "migration": target.get("migration")},
    )
    drive.decide(step=step, outcome=ENDED_REASON)
    drive.history.add(
        "WORKFLOW_COMPLETED", step=step, command_id=cmd["id"], actor=drive.actor, payload={"reason": ENDED_REASON}
    )
    teardown.end_run(drive, RunStatus.COMPLETED)


def _settle_item(migration_id: Any, run_id: Any, status: str, detail: str, command_id: int) -> None:
    if not migration_id:
        return
    db.execute(
        SQL.settle_item,
        [status, detail, command_id, migration_id, run_id],
        prepared=True,
    )
