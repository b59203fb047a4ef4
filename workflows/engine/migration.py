"""Migration of runs: the MIGRATION command's handler and the position-based bulk migration.

The handler (``segment.APPLY['MIGRATION']``) runs in the segment of a MIGRATION
command, under the run's execution lock. Its target (written by ``recording.migrate``) is
``{version, scope, step, action, migration, expected_step, expected_version}``:

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

The bulk half works on ``MigrationRecord``/``MigrationItem`` rows: positions are counted from
open parks with one GROUP BY on the partial index (never per-run rows); a preview freezes the
selected runs as items; Apply records one MIGRATION command per item in bounded batches, and
the handler writes each item's outcome in the segment that settles the command.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from workflows import conf
from workflows.definitions import plan as p
from workflows.definitions.expressions import placeholders
from workflows.definitions.plan import Plan
from workflows.engine import db, driver, locks, observers, teardown, waits
from workflows.engine.actors import Actor
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.settlement import Settle, completed, received
from workflows.exceptions import (
    InvalidPayload,
    MigrationIllegalState,
    Violation,
    WorkflowError,
)

log = logging.getLogger("workflows.engine")

ACTIONS = ("move", "cancel", "end")
LARGE_BATCH = 100  # above this many runs, Apply needs the number typed back
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


def apply_migration(drive: Drive, cmd: dict[str, Any]) -> Settle:
    """The MIGRATION command's segment (``segment.APPLY``)."""
    run = drive.run
    target = cmd["target"] or {}
    action = str(target.get("action") or "move")
    migration_id = target.get("migration")
    received(drive, cmd)
    expected_step = target.get("expected_step")
    expected_version = target.get("expected_version")
    if expected_step is not None and (
        run["status"] != "WAITING"
        or parked_at(run) != expected_step
        or (expected_version is not None and int(run["version"]) != int(expected_version))
    ):
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="MOVED_ON")
        _settle_item(migration_id, run["id"], "MOVED_ON", "MOVED_ON", cmd["id"])
        return Settle("STALE", "MOVED_ON: the run has moved on since it was selected")
    try:
        with drive.savepoint():
            outcome = _apply(drive, cmd, target, action)
    except _Rejected as rejected:
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="MIGRATION_REJECTED")
        _settle_item(migration_id, run["id"], "REJECTED", "MIGRATION_REJECTED", cmd["id"])
        return Settle("REJECTED", f"MIGRATION_REJECTED: {rejected.text}")
    except StepLimitExceeded:
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="STEP_LIMIT")
        _settle_item(migration_id, run["id"], "REJECTED", "STEP_LIMIT", cmd["id"])
        return Settle("REJECTED", "STEP_LIMIT: the segment ran more nodes than maxStepsPerSegment")
    except (DeterministicFailure, WorkflowError):
        # the target node could not be entered (an expression, an assignment, a call refused):
        # the savepoint took every write back, the run stays where it was
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="MIGRATION_REJECTED")
        _settle_item(migration_id, run["id"], "REJECTED", "TARGET_NOT_ENTERED", cmd["id"])
        return Settle("REJECTED", "MIGRATION_REJECTED: the target node could not be entered")
    if action == "move":
        driver.after_drive(drive, outcome)  # the item was marked MOVED with the park it closed
    else:
        _settle_item(migration_id, run["id"], {"cancel": "CANCELLED", "end": "ENDED"}[action], "", cmd["id"])
    return completed(drive, cmd)


def _apply(drive: Drive, cmd: dict[str, Any], target: dict[str, Any], action: str) -> Any:
    run = drive.run
    if action not in ACTIONS:
        raise _Rejected("the action is not move, cancel or end")
    if run["status"] == "FAILED":
        raise _Rejected("the run has failed")
    if run["status"] != "WAITING":
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


def parked_at(run: dict[str, Any]) -> str:
    """The node of the run's main-path park: its wait's step (a run at a join waits at the
    join while its current step is the fork), else its current step."""
    wait = run.get("wait")
    return str((wait or {}).get("step") or run.get("current_step") or "")


def _from(run: dict[str, Any]) -> dict[str, Any]:
    return {"scope": run["scope"], "version": int(run["version"]), "step": parked_at(run)}


# -- name: leave_for_target
# Admit the move and leave the old wait in one statement: the run has no active branches and
# the target row is AVAILABLE and not marked failing (read under a share lock, so a retirement
# or deprecation of the target cannot commit between this check and the re-pin); only then
# close the park with where the run goes, withdraw the main path's approval and mark the
# migration item MOVED (the segment's savepoint takes all of it back if entering the target
# node fails).
LEAVE_FOR_TARGET = (
    "WITH a AS (SELECT NOT EXISTS (SELECT 1 FROM workflow_branches WHERE run_id = %(run)s "
    "AND status IN ('RUNNING','WAITING')) AS no_branches, d.status, d.failure FROM workflow_definitions d "
    "WHERE d.scope = %(scope)s AND d.definition_id = %(definition)s AND d.version = %(version)s FOR SHARE OF d), "
    "ok AS (SELECT 1 FROM a WHERE a.no_branches AND a.status = 'AVAILABLE' AND coalesce(a.failure, '') = ''), "
    "p AS (UPDATE workflow_parks SET left_at = now(), left_how = 'moved', moved_to_version = %(version)s, "
    "moved_to_scope = %(scope)s, moved_to_node = %(node)s, moved_by = %(by)s, migration_id = %(migration)s "
    "WHERE id = %(park)s AND left_at IS NULL AND EXISTS (SELECT 1 FROM ok) RETURNING id), "
    "t AS (UPDATE workflow_tasks SET status = 'WITHDRAWN', reservation_owner = NULL, closed_at = now(), "
    "updated_at = now() WHERE run_id = %(run)s AND branch_id = '' AND status IN ('OPEN','COMPLETING') "
    "AND EXISTS (SELECT 1 FROM ok) RETURNING id, step), "
    "i AS (UPDATE workflow_migration_items SET status = 'MOVED', detail = '', command_id = %(command)s, "
    "updated_at = now() WHERE record_id = %(migration)s AND run_id = %(run)s AND EXISTS (SELECT 1 FROM ok) "
    "RETURNING id) "
    "SELECT (SELECT no_branches FROM a), EXISTS (SELECT 1 FROM ok), "
    "coalesce((SELECT json_agg(json_build_object('id', t.id, 'step', t.step)) FROM t), '[]'::json), "
    "(SELECT count(*) FROM p) + (SELECT count(*) FROM i)"
)


def _move(drive: Drive, cmd: dict[str, Any], target: dict[str, Any], target_scope: str) -> Any:
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

    origin = _from(run)
    migration_id = target.get("migration")
    row = db.fetchone(
        LEAVE_FOR_TARGET,
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
        child = locks.lock_run(wait["child"])
        if child["status"] not in teardown.ENDED:
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
    return driver.run_from(drive, step)


def _target_plan(scope: str, definition_id: str, version: int) -> Plan:
    """The target plan (the executor made it resident before the claim)."""
    from workflows.definitions import cache

    try:
        return cache.get_plan(scope=scope, definition_id=definition_id, version=version)
    except WorkflowError:
        raise _Rejected("the target revision is not available") from None


def _mapped_state(run: dict[str, Any], target_plan: Plan, target_version: int) -> Any:
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
        "SELECT id, target FROM workflow_commands WHERE run_id = %s AND status = 'PARKED' AND kind = 'SIGNAL'",
        [drive.run["id"]],
    )
    refused = [r["id"] for r in rows if not target_plan.waits_for(str((r["target"] or {}).get("name", "")))]
    if not refused:
        return
    db.execute(
        "UPDATE workflow_commands SET status = 'REJECTED', settled_at = now(), "
        "last_error = 'SIGNAL_REJECTED: the target revision never waits for this signal' "
        "WHERE id = ANY(%s) AND status = 'PARKED'",
        [refused],
    )
    for command_id in refused:
        drive.history.add("COMMAND_REJECTED", command_id=command_id, actor=drive.actor, outcome="SIGNAL_REJECTED")
    observers.settled_on_commit(drive.run["id"], [(c, "SIGNAL", "REJECTED") for c in refused])
    drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - len(refused))


def _cancel(drive: Drive, cmd: dict[str, Any], target: dict[str, Any]) -> None:
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
        payload={"action": "cancel", "from": _from(run), "to": None, "migration": target.get("migration")},
    )
    teardown.cancel_in_segment(drive, command_id=cmd["id"], reason=CANCEL_REASON)


def _end(drive: Drive, cmd: dict[str, Any], target: dict[str, Any]) -> None:
    run = drive.run
    wait = run["wait"] or {}
    step = parked_at(run)
    waits.close_park(wait.get("park"), "ended", by=actor_label(drive.actor), migration_id=target.get("migration"))
    drive.history.add(
        "WORKFLOW_MIGRATED",
        step=step,
        command_id=cmd["id"],
        actor=drive.actor,
        payload={"action": "end", "from": _from(run), "to": None, "migration": target.get("migration")},
    )
    drive.decide(step=step, outcome=ENDED_REASON)
    drive.history.add(
        "WORKFLOW_COMPLETED", step=step, command_id=cmd["id"], actor=drive.actor, payload={"reason": ENDED_REASON}
    )
    teardown.end_run(drive, "COMPLETED")


def _settle_item(migration_id: Any, run_id: Any, status: str, detail: str, command_id: int) -> None:
    if not migration_id:
        return
    db.execute(
        "UPDATE workflow_migration_items SET status = %s, detail = %s, command_id = %s, updated_at = now() "
        "WHERE record_id = %s AND run_id = %s",
        [status, detail, command_id, migration_id, run_id],
        prepared=True,
    )


# --- positions: where runs are parked ---------------------------------------------------------

# Counts come from workflow_park_counts, which a trigger keeps with every park opened and
# closed (migration 0008): a position costs its stripes (at most 16 rows), not its runs. The
# oldest wait of a position is the first entry of the partial index workflow_park_open
# (definition_id, scope, version, node, kind, since WHERE left_at IS NULL AND branch_id = '').
#
# A FAILED run keeps the park of the wait it failed in (a retry returns it there), but it
# cannot be moved (a migration of a failed run is rejected), so it is not counted as parked:
# the open parks of the definition's FAILED runs — few, found through the runs' pin index and
# the parks' run index — are taken off the counts, and left out of the oldest wait, the
# picker and the frozen selection.
NOT_FAILED = "NOT EXISTS (SELECT 1 FROM workflow_runs fr WHERE fr.id = p.run_id AND fr.status = 'FAILED')"
OLDEST_AT_POSITION = (
    "(SELECT p.since FROM workflow_parks p WHERE p.left_at IS NULL AND p.branch_id = '' "
    "AND p.definition_id = c.definition_id AND p.scope = c.scope AND p.version = c.version AND p.node = c.node "
    f"AND p.kind = c.kind AND {NOT_FAILED} ORDER BY p.since LIMIT 1)"
)


def counted_positions(where: str, failed_where: str) -> str:
    """The open main-path parks per position (``where`` over workflow_park_counts), less
    those of FAILED runs (``failed_where`` over their runs ``r``): a subquery ``c`` of
    (definition_id, scope, version, node, kind, runs) with runs > 0."""
    return (
        "(SELECT k.definition_id, k.scope, k.version, k.node, k.kind, k.runs - coalesce(f.runs, 0) AS runs FROM "
        "(SELECT definition_id, scope, version, node, kind, sum(runs) AS runs FROM workflow_park_counts "
        f"WHERE {where} GROUP BY definition_id, scope, version, node, kind) k LEFT JOIN "
        "(SELECT p.definition_id, p.scope, p.version, p.node, p.kind, count(*) AS runs FROM workflow_runs r "
        "JOIN workflow_parks p ON p.run_id = r.id AND p.left_at IS NULL AND p.branch_id = '' "
        f"WHERE r.status = 'FAILED' AND {failed_where} "
        "GROUP BY p.definition_id, p.scope, p.version, p.node, p.kind) f "
        "ON (f.definition_id, f.scope, f.version, f.node, f.kind) "
        "= (k.definition_id, k.scope, k.version, k.node, k.kind) "
        "WHERE k.runs - coalesce(f.runs, 0) > 0) c"
    )


# -- name: positions
# One row per position of a revision that holds parked runs.
POSITIONS = (
    f"SELECT c.node, c.kind, c.runs, {OLDEST_AT_POSITION} AS oldest FROM "
    + counted_positions(
        "definition_id = %(d)s AND scope = %(s)s AND version = %(v)s",
        "r.definition_id = %(d)s AND r.scope = %(s)s AND r.version = %(v)s",
    )
    + " ORDER BY c.node, c.kind"
)

# -- name: positions_by_revision
# The positions of every revision of a definition (the dialog reads its header and its rows
# from this one statement).
POSITIONS_BY_REVISION = (
    f"SELECT c.version, c.node, c.kind, c.runs, {OLDEST_AT_POSITION} AS oldest FROM "
    + counted_positions("definition_id = %(d)s AND scope = %(s)s", "r.definition_id = %(d)s AND r.scope = %(s)s")
    + " ORDER BY c.version, c.node, c.kind"
)

# -- name: parked_by_version
# How many runs are parked per revision of a definition (every revision, the current one too).
PARKED_BY_VERSION = (
    "SELECT c.scope, c.version, sum(c.runs) FROM "
    + counted_positions("definition_id = %(d)s", "r.definition_id = %(d)s")
    + " GROUP BY c.scope, c.version"
)

# -- name: parked_by_definition
PARKED_BY_DEFINITION = "SELECT c.definition_id, c.scope, sum(c.runs) FROM {counted} GROUP BY c.definition_id, c.scope"


@dataclass(frozen=True)
class Position:
    node: str
    kind: str
    runs: int
    oldest: Any = None


def positions(*, scope: str, definition_id: str, version: int) -> list[Position]:
    return [
        Position(node=r[0], kind=r[1], runs=int(r[2]), oldest=r[3])
        for r in db.fetchall(POSITIONS, {"d": definition_id, "s": scope, "v": int(version)})
    ]


def positions_by_revision(*, scope: str, definition_id: str) -> dict[int, list[Position]]:
    found: dict[int, list[Position]] = {}
    for version, node, kind, runs, oldest in db.fetchall(POSITIONS_BY_REVISION, {"d": definition_id, "s": scope}):
        found.setdefault(int(version), []).append(Position(node=node, kind=kind, runs=int(runs), oldest=oldest))
    return found


def parked_by_version(*, definition_id: str) -> dict[tuple[str, int], int]:
    return {(str(s), int(v)): int(n) for s, v, n in db.fetchall(PARKED_BY_VERSION, {"d": definition_id})}


def parked_by_definition(definition_ids: Iterable[str] | None = None) -> dict[tuple[str, str], int]:
    """Parked runs per (definition id, scope), every revision included (FAILED runs are not
    parked: they cannot be moved)."""
    if definition_ids is None:
        sql = PARKED_BY_DEFINITION.format(counted=counted_positions("true", "true"))
        rows = db.fetchall(sql)
    else:
        sql = PARKED_BY_DEFINITION.format(
            counted=counted_positions("definition_id = ANY(%(ids)s)", "r.definition_id = ANY(%(ids)s)")
        )
        rows = db.fetchall(sql, {"ids": list(definition_ids)})
    return {(str(d), str(s)): int(n) for d, s, n in rows}


def runs_at(
    *,
    scope: str,
    definition_id: str,
    version: int,
    node: str,
    kind: str,
    search: str = "",
    offset: int = 0,
    limit: int = 25,
) -> tuple[list[dict[str, Any]], int]:
    """One page of the runs parked at a position (oldest first), optionally those whose
    business key contains ``search``; answers (rows, matching count)."""
    where = (
        "p.left_at IS NULL AND p.definition_id = %s AND p.scope = %s AND p.version = %s AND p.node = %s "
        "AND p.kind = %s AND p.branch_id = '' AND r.status <> 'FAILED'"
    )
    params: list[Any] = [definition_id, scope, int(version), node, kind]
    if search:
        where += " AND r.business_key ILIKE %s"
        params.append("%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    rows = db.fetchdicts(
        "SELECT r.id, r.business_key, r.status, p.since FROM workflow_parks p JOIN workflow_runs r ON r.id = p.run_id "
        f"WHERE {where} ORDER BY p.since, p.id LIMIT %s OFFSET %s",
        [*params, int(limit), int(offset)],
    )
    if search or offset or len(rows) >= limit:
        total = db.fetchone(
            f"SELECT count(*) FROM workflow_parks p JOIN workflow_runs r ON r.id = p.run_id WHERE {where}", params
        )
        count = int(total[0]) if total else 0
    else:
        count = len(rows)
    return rows, count


# --- preview: freeze the selection -----------------------------------------------------------


@dataclass
class RowRequest:
    """One position row of the dialog as the user left it."""

    node: str
    kind: str
    action: str = "move"  # move / cancel / end
    target_node: str = ""
    runs: str | list[str] = field(default_factory=list)  # "all", or the picked run ids


def _bad(pointer: str, message: str) -> InvalidPayload:
    return InvalidPayload(message, violations=[Violation(pointer=pointer, type="invalid", message=message)])


def _revision(scope: str, definition_id: str, version: int) -> dict[str, Any] | None:
    return db.fetchdict(
        "SELECT version, status, contract, failure, plan_hash FROM workflow_definitions "
        "WHERE scope = %s AND definition_id = %s AND version = %s",
        [scope, definition_id, int(version)],
    )


def plan_of(scope: str, definition_id: str, version: int) -> Plan | None:
    """The plan of a revision for reading (None when this node cannot build it)."""
    from workflows.definitions import cache

    try:
        return cache.get_plan(scope=scope, definition_id=definition_id, version=int(version))
    except WorkflowError:
        return None


def freeze(
    *,
    scope: str,
    definition_id: str,
    source_version: int,
    target_version: int,
    rows: list[RowRequest],
    actor: Actor,
    reason: str = "",
) -> int | None:
    """Freeze the selected runs as a PREVIEWED migration record; None when nothing is selected.

    Refuses INVALID_PAYLOAD (value-free) for an unknown revision, action or target node.
    """
    from workflows.engine.actors import sanitise

    if _revision(scope, definition_id, source_version) is None:
        raise _bad("/source_version", "the source revision does not exist")
    if _revision(scope, definition_id, target_version) is None:
        raise _bad("/target_version", "the target revision does not exist")
    chosen = [(i, r) for i, r in enumerate(rows) if r.runs == "all" or (isinstance(r.runs, list) and r.runs)]
    if not chosen:
        return None
    target_plan = None
    for i, r in chosen:
        if r.action not in ACTIONS:
            raise _bad(f"/rows/{i}/action", "the action must be move, cancel or end")
        if r.action == "move":
            if target_plan is None:
                target_plan = plan_of(scope, definition_id, target_version)
                if target_plan is None:
                    raise _bad("/target_version", "the target revision cannot be read here")
            if r.target_node not in target_plan.steps:
                raise _bad(f"/rows/{i}/target_node", "the target revision has no such node")
    with transaction.atomic():
        record_id = db.fetchone(
            "INSERT INTO workflow_migration_records (scope, definition_id, source_version, target_version, "
            "target_scope, created_by, reason, status, rows, total, created_at, applied_by, updated_at) "
            "VALUES (%s,%s,%s,%s,%s,%s,%s,'PREVIEWED','[]',0,now(),'',now()) RETURNING id",
            [
                scope,
                definition_id,
                int(source_version),
                int(target_version),
                scope,
                actor_label(actor),
                sanitise(reason.replace("\n", " "))[:500],
            ],
        )
        assert record_id is not None
        rid = int(record_id[0])
        summary: list[dict[str, Any]] = []
        total = 0
        for i, r in chosen:
            where = (
                "p.left_at IS NULL AND p.definition_id = %s AND p.scope = %s AND p.version = %s AND p.node = %s "
                f"AND p.kind = %s AND p.branch_id = '' AND {NOT_FAILED}"
            )
            params: list[Any] = [definition_id, scope, int(source_version), r.node, r.kind]
            if r.runs != "all":
                ids = _uuids(r.runs)
                if not ids:
                    continue
                where += " AND p.run_id = ANY(%s::uuid[])"
                params.append(ids)
            frozen = db.execute(
                "INSERT INTO workflow_migration_items (record_id, run_id, row, source_node, kind, action, target_node, "
                "status, command_id, detail) SELECT %s, p.run_id, %s, p.node, p.kind, %s, %s, 'SELECTED', NULL, '' "
                f"FROM workflow_parks p WHERE {where} ON CONFLICT DO NOTHING",
                [rid, i, r.action, r.target_node if r.action == "move" else "", *params],
            )
            if frozen:
                summary.append(
                    {
                        "row": i,
                        "node": r.node,
                        "kind": r.kind,
                        "action": r.action,
                        "target_node": r.target_node if r.action == "move" else "",
                        "selection": "all" if r.runs == "all" else "picked",
                        "runs": frozen,
                    }
                )
                total += frozen
        if not total:
            transaction.set_rollback(True)
            return None
        db.execute(
            "UPDATE workflow_migration_records SET rows = %s, total = %s WHERE id = %s", [db.jsonb(summary), total, rid]
        )
    return rid


def _uuids(values: Iterable[Any]) -> list[str]:
    found = []
    for v in values:
        try:
            found.append(str(uuid.UUID(str(v))))
        except ValueError:
            continue
    return found[:100000]


def discard(*, record_id: int) -> bool:
    """Abandon a preview that was never applied (its frozen runs are released)."""
    return bool(
        db.execute(
            "UPDATE workflow_migration_records SET status = 'DISCARDED', updated_at = now() "
            "WHERE id = %s AND status = 'PREVIEWED'",
            [record_id],
        )
    )


# --- apply: record MIGRATION commands in bounded batches ---------------------------------------


@dataclass(frozen=True)
class Progress:
    record_id: int
    status: str
    total: int
    counts: dict[str, int]

    @property
    def left(self) -> int:
        return self.counts.get("SELECTED", 0)

    @property
    def in_flight(self) -> int:
        return self.counts.get("RECORDED", 0)

    @property
    def settled(self) -> int:
        return self.total - self.left - self.in_flight

    @property
    def percent(self) -> int:
        return 100 if not self.total else int(100 * self.settled / self.total)


def apply_batch(*, record_id: int, actor: Actor, confirm: int | None = None, limit: int | None = None) -> Progress:
    """Record the next batch (``MIGRATE.APPLY_BATCH``) of MIGRATION commands of a record.

    Each run is re-checked under its execution lock: a run no longer at the position it was
    selected at, ended, or with another migration pending is marked MOVED_ON (not forced); a
    failed run REJECTED; a run whose lock is busy right now stays for the next Apply. The
    executor checks each command again when it applies it.
    Refuses: MIGRATION_ILLEGAL_STATE (discarded or unknown record), INVALID_PAYLOAD (a batch of
    more than 100 runs applied for the first time without ``confirm`` equal to its size).
    """
    batch = int(limit or conf.get().MIGRATE.APPLY_BATCH)
    with transaction.atomic():
        # the record row serialises concurrent Apply presses (lock order: record, then runs)
        rec = db.fetchdict(
            "SELECT id, scope, definition_id, source_version, target_version, target_scope, status, total "
            "FROM workflow_migration_records WHERE id = %s FOR UPDATE",
            [record_id],
        )
        if rec is None:
            raise MigrationIllegalState("migration record not found")
        if rec["status"] == "DISCARDED":
            raise MigrationIllegalState("the preview was discarded")
        if rec["status"] == "PREVIEWED" and rec["total"] > LARGE_BATCH and confirm != rec["total"]:
            raise InvalidPayload(
                "a batch of more than 100 runs needs its number of runs typed as confirmation",
                violations=[
                    Violation(pointer="/confirm", type="confirmation", message="type the number of runs to confirm")
                ],
            )
        items = db.fetchdicts(
            "SELECT id, run_id, source_node, action, target_node FROM workflow_migration_items "
            "WHERE record_id = %s AND status = 'SELECTED' ORDER BY id LIMIT %s",
            [record_id, batch],
        )
        outcomes = _record_batch(rec, items, actor) if items else []
        if outcomes:
            db.execute(
                "UPDATE workflow_migration_items i SET status = v.status, detail = v.detail, "
                "command_id = v.command_id, updated_at = now() "
                "FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::text[]) AS status, "
                "unnest(%s::text[]) AS detail, unnest(%s::bigint[]) AS command_id) v "
                "WHERE i.id = v.id AND i.status = 'SELECTED'",
                [
                    [o[0] for o in outcomes],
                    [o[1] for o in outcomes],
                    [o[2] for o in outcomes],
                    [o[3] for o in outcomes],
                ],
            )
        db.execute(
            "UPDATE workflow_migration_records SET status = CASE WHEN status = 'PREVIEWED' THEN 'APPLYING' "
            "ELSE status END, applied_at = coalesce(applied_at, now()), applied_by = CASE WHEN applied_by = '' "
            "THEN %s ELSE applied_by END, updated_at = now() WHERE id = %s",
            [actor_label(actor), record_id],
        )
    return progress(record_id=record_id)


# -- name: lock_batch
# The execution locks of a batch of runs, taken together without waiting: a run whose lock is
# busy (a segment, an approver's completion, a cancel) is skipped and stays for the next Apply,
# so this never waits for one run's lock while holding others.
LOCK_BATCH = (
    f"SELECT {locks.RUN_COLUMNS} FROM workflow_runs WHERE id = ANY(%s::uuid[]) "
    "ORDER BY id FOR NO KEY UPDATE SKIP LOCKED"
)

# -- name: migrations_pending
MIGRATIONS_PENDING = (
    "SELECT DISTINCT run_id FROM workflow_commands WHERE run_id = ANY(%s::uuid[]) AND kind = 'MIGRATION' "
    "AND status IN ('PENDING','DEFERRED','CLAIMED')"
)

# -- name: record_migrations
# One MIGRATION command per run at the run's next queue position (the same row recording.migrate
# writes), and the runs' queue counters moved on, in one statement.
RECORD_MIGRATIONS = (
    "WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::int[], %s::jsonb[]) AS v(run_id, seq, target)), "
    "c AS (INSERT INTO workflow_commands (run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id, "
    "dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, available_at, fire_at, "
    "claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, reconcile_action, "
    "actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status) "
    "SELECT v.run_id, v.seq, 'MIGRATION', '', 'PENDING', NULL, v.target, NULL, NULL, '', '', 0, 0, 0, "
    "clock_timestamp(), clock_timestamp(), clock_timestamp(), NULL, '', '', NULL, false, '', '', '', "
    "%s, %s, %s, %s, %s FROM v RETURNING id, run_id), "
    "u AS (UPDATE workflow_runs r SET next_seq = v.seq + 1, updated_at = now() FROM v WHERE r.id = v.run_id) "
    "SELECT id, run_id FROM c"
)


def _record_batch(
    rec: dict[str, Any], items: list[dict[str, Any]], actor: Actor
) -> list[tuple[int, str, str, int | None]]:
    """The checks of ``recording.migrate`` (ended, scope, pending migration) and the position
    check, for a whole batch in four statements; answers (item id, status, detail, command id)."""
    from workflows.engine import observers, wakeups

    ids = [str(i["run_id"]) for i in items]
    locked = {str(r["id"]): r for r in db.fetchdicts(LOCK_BATCH, [ids])}
    pending = {str(r[0]) for r in db.fetchall(MIGRATIONS_PENDING, [list(locked)])} if locked else set()
    outcomes: list[tuple[int, str, str, int | None]] = []
    chosen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for item in items:
        run = locked.get(str(item["run_id"]))
        if run is None:
            continue  # busy right now: left SELECTED for the next Apply
        if run["status"] in teardown.ENDED:
            outcomes.append((item["id"], "MOVED_ON", "ENDED", None))
        elif run["status"] == "FAILED":
            outcomes.append((item["id"], "REJECTED", "INSTANCE_FAILED", None))
        elif (
            run["status"] != "WAITING"
            or parked_at(run) != item["source_node"]
            or int(run["version"]) != int(rec["source_version"])
            or run["scope"] != rec["scope"]
        ):
            outcomes.append((item["id"], "MOVED_ON", "MOVED_ON", None))
        elif str(run["id"]) in pending:
            outcomes.append((item["id"], "MOVED_ON", "MIGRATION_PENDING", None))
        else:
            chosen.append((item, run))
    if not chosen:
        return outcomes
    moved, chosen = _move_set_based(rec, chosen, actor)
    outcomes.extend(moved)
    if not chosen:
        return outcomes
    targets = [
        db.jsonb(
            {
                "version": int(rec["target_version"]),
                "scope": rec["target_scope"],
                "step": item["target_node"] or None,
                "action": item["action"],
                "migration": int(rec["id"]),
                "expected_step": item["source_node"],
                "expected_version": int(rec["source_version"]),
            }
        )
        for item, _ in chosen
    ]
    recorded = {
        str(run_id): int(command_id)
        for command_id, run_id in db.fetchall(
            RECORD_MIGRATIONS,
            [
                [str(run["id"]) for _, run in chosen],
                [int(run["next_seq"]) for _, run in chosen],
                targets,
                *actor.columns(),
            ],
        )
    }
    for item, run in chosen:
        outcomes.append((item["id"], "RECORDED", "", recorded[str(run["id"])]))
        wakeups.wake(run["id"])
        if actor.kind == "NONE":
            observers.emit(observers.ActorAbsent("MIGRATION"))
    return outcomes


def _move_set_based(
    rec: dict[str, Any], chosen: list[tuple[dict[str, Any], dict[str, Any]]], actor: Actor
) -> tuple[list[tuple[int, str, str, int | None]], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """The moves ``migration_bulk`` makes for the batch at once (in a savepoint: a batch it
    cannot write goes the MIGRATION command way whole)."""
    from django.db import DatabaseError

    from workflows.engine import migration_bulk

    try:
        with transaction.atomic():
            return migration_bulk.move(rec, chosen, actor)
    except DatabaseError as exc:
        if db.is_transient(exc):
            raise
        log.warning("a set-based move of migration %s failed; its runs get MIGRATION commands", rec["id"])
        return [], chosen


# -- name: settle_items_from_commands
# Items whose command was settled without the handler (at the claim: the run had ended, failed
# or was cancelled meanwhile) take their outcome from the command.
SETTLE_FROM_COMMANDS = (
    "UPDATE workflow_migration_items i SET status = CASE WHEN c.status IN ('CANCELLED','STALE') "
    "OR c.last_error LIKE 'INSTANCE_ENDED%%' THEN 'MOVED_ON' ELSE 'REJECTED' END, "
    "detail = left(split_part(c.last_error, ':', 1), 64), updated_at = now() "
    "FROM workflow_commands c WHERE i.record_id = %s AND i.status = 'RECORDED' AND c.id = i.command_id "
    "AND c.status IN ('REJECTED','STALE','CANCELLED','FAILED','DEAD')"
)


def progress(*, record_id: int) -> Progress:
    """Where a record stands: item counts by status; finishes the record when nothing is left."""
    with transaction.atomic():
        db.execute(SETTLE_FROM_COMMANDS, [record_id])
        rec = db.fetchdict("SELECT status, total FROM workflow_migration_records WHERE id = %s", [record_id])
        if rec is None:
            raise MigrationIllegalState("migration record not found")
        counts = {
            str(s): int(n)
            for s, n in db.fetchall(
                "SELECT status, count(*) FROM workflow_migration_items WHERE record_id = %s GROUP BY status",
                [record_id],
            )
        }
        status = rec["status"]
        if status == "APPLYING" and not counts.get("SELECTED") and not counts.get("RECORDED"):
            db.execute(
                "UPDATE workflow_migration_records SET status = 'DONE', finished_at = now(), updated_at = now() "
                "WHERE id = %s AND status = 'APPLYING'",
                [record_id],
            )
            status = "DONE"
    return Progress(record_id=record_id, status=status, total=int(rec["total"]), counts=counts)


# --- preview facts: what Apply will do, per row ------------------------------------------------


def describe_target(step: p.Step | None) -> dict[str, Any]:
    """What entering a node fresh will do (from the plan alone; no run is read)."""
    if step is None:
        return {"type": "missing"}
    facts: dict[str, Any] = {"type": step.type, "node": step.id}
    if isinstance(step, p.HumanTaskStep):
        a = step.assignment
        facts["assignment"] = (
            {"mode": "expression", "value": ""}
            if a.mode == "expression"
            else {"mode": "group" if a.mode == "role" else a.mode, "value": a.value or ""}
        )
        # placeholders are filled from each run's state when the task opens
        facts["title"] = _mask_placeholders(step.title or step.id)
        facts["title_varies"] = "{{" in (step.title or "") or step.title_template is not None
        if step.due is not None:
            facts["due_seconds"] = step.due.delay.seconds
            facts["due_computed"] = step.due.delay.at is not None
        if step.reminder_every_seconds:
            facts["reminder_seconds"] = step.reminder_every_seconds
    elif isinstance(step, p.TimerStep):
        facts["timer_seconds"] = step.delay.seconds
        facts["timer_computed"] = step.delay.at is not None
    elif isinstance(step, p.WaitSignalStep):
        facts["signal"] = step.signal
        if step.timeout is not None:
            facts["timeout_seconds"] = step.timeout.delay.seconds
            facts["timeout_computed"] = step.timeout.delay.at is not None
    elif isinstance(step, (p.ServiceStep, p.EmailStep, p.AgentStep, p.ScriptStep, p.CallStep)):
        facts["effect"] = True  # entering it runs its effect once, as any fresh arrival does
    elif isinstance(step, (p.CompleteStep, p.EndStep, p.FailStep)):
        facts["terminal"] = True
    return facts


def row_facts(*, record_id: int) -> list[dict[str, Any]]:
    """Per frozen row: the approvals that will be withdrawn (grouped by assignee), the timers
    that will be disarmed, and the database clock for computing new due times."""
    tasks = db.fetchall(
        "SELECT i.row, t.assignment_mode, t.assignment_value, count(*) FROM workflow_migration_items i "
        "JOIN workflow_tasks t ON t.run_id = i.run_id AND t.branch_id = '' AND t.status IN ('OPEN','COMPLETING') "
        "WHERE i.record_id = %s AND i.status = 'SELECTED' GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC",
        [record_id],
    )
    timers = db.fetchall(
        "SELECT i.row, t.kind, count(*) FROM workflow_migration_items i JOIN workflow_timers t ON t.run_id = i.run_id "
        "AND t.status = 'SCHEDULED' AND t.branch_id = '' WHERE i.record_id = %s AND i.status = 'SELECTED' "
        "GROUP BY 1, 2 ORDER BY 1, 2",
        [record_id],
    )
    counts = db.fetchall(
        "SELECT row, status, count(*) FROM workflow_migration_items WHERE record_id = %s GROUP BY 1, 2",
        [record_id],
    )
    by_row: dict[int, dict[str, Any]] = {}
    for row, status, n in counts:
        by_row.setdefault(int(row), {"tasks": [], "timers": {}, "counts": {}})["counts"][str(status)] = int(n)
    for row, mode, value, n in tasks:
        by_row.setdefault(int(row), {"tasks": [], "timers": {}, "counts": {}})["tasks"].append(
            {"mode": mode, "value": value, "count": int(n)}
        )
    for row, kind, n in timers:
        by_row.setdefault(int(row), {"tasks": [], "timers": {}, "counts": {}})["timers"][str(kind)] = int(n)
    return [{"row": k, **v} for k, v in sorted(by_row.items())]


def _mask_placeholders(title: str) -> str:
    """``title`` with each ``{{ ... }}`` shown as an ellipsis (a linear scan: a lazy regular
    expression rescanned the rest of the title from every unclosed ``{{``)."""
    out: list[str] = []
    position = 0
    for start, end, _ in placeholders(title):
        out.append(title[position:start])
        out.append("…")
        position = end
    out.append(title[position:])
    return "".join(out)
