"""The preview of a migration: the selected runs frozen as items of a PREVIEWED record, and
what Apply will do per row (from the plan, and per frozen row from the database).

The Migrate dialog and the bulk API read these before anything moves; ``apply`` then works
on the frozen items. Statements: ``engine/sql/migration_preview.sql`` (the item insert takes
its WHERE clause from the row, so it is composed here).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from workflows import conf
from workflows.definitions import plan as p
from workflows.definitions import steps
from workflows.definitions.expressions import placeholders
from workflows.definitions.plan import Plan
from workflows.engine import db, sql
from workflows.engine.actors import Actor
from workflows.engine.migration.handler import ACTIONS, actor_label
from workflows.engine.migration.positions import NOT_FAILED
from workflows.exceptions import InvalidPayload, RunsInOpenMigration, Violation, WorkflowError

SQL = sql.load("migration_preview")
BACKGROUND_SQL = sql.load("migration_background")


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
        SQL.revision,
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
    replaces: int | None = None,
    notify_digest: bool | None = None,
) -> int | None:
    """Freeze the selected runs as a PREVIEWED migration record; None when nothing is selected.

    ``replaces``: a preview of the same dialog that this one supersedes; it is discarded first
    (when it is still only previewed), so its runs can be frozen again.
    ``notify_digest`` (default: ``MIGRATE.DIGEST_NOTICES``) is kept on the record: whether the
    assignees whose approvals a move reopens for them get one digest (see ``outbox.digest``).
    Refuses INVALID_PAYLOAD (value-free) for an unknown revision, action or target node, and
    RUNS_IN_OPEN_MIGRATION when a selected run is frozen in another migration that is not over
    (previewed, applying or paused: apply, discard or close that one first). Nothing is written
    then.
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
        if replaces is not None:
            discard(record_id=int(replaces))
        record_id = db.fetchone(
            SQL.insert_record,
            [
                scope,
                definition_id,
                int(source_version),
                int(target_version),
                scope,
                actor_label(actor),
                sanitise(reason.replace("\n", " "))[:500],
                bool(conf.get().MIGRATE.DIGEST_NOTICES if notify_digest is None else notify_digest),
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
            _refuse_runs_open_elsewhere(rid, where, params)
            frozen = db.execute(
                SQL.freeze_items.format(where=where),
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
        db.execute(SQL.record_rows, [db.jsonb(summary), total, rid])
    return rid


def _refuse_runs_open_elsewhere(record_id: int, where: str, params: list[Any]) -> None:
    """A run is frozen into one open migration at a time (the partial unique index
    ``workflow_migration_item_open_run`` holds it against a concurrent freeze, whose insert then
    skips the run)."""
    found = db.fetchall(BACKGROUND_SQL.frozen_elsewhere.format(where=where), [record_id, *params])
    if found:
        other, status, _ = found[0]
        total = sum(int(r[2]) for r in found)
        raise RunsInOpenMigration(
            f"{total} of the selected runs are already in migration {int(other)}, which is not over",
            record_id=int(other),
            runs=total,
            status=str(status),
        )


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
    if not db.execute(SQL.discard, [record_id]):
        return False
    db.execute(SQL.discard_items, [record_id])
    return True


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
    else:
        kind = steps.REGISTRY.get(step.type)
        if kind is not None and kind.effect:
            facts["effect"] = True  # entering it runs its effect once, as any fresh arrival does
        elif kind is not None and kind.terminal:
            facts["terminal"] = True
    return facts


def row_facts(*, record_id: int) -> list[dict[str, Any]]:
    """Per frozen row: the approvals that will be withdrawn (grouped by assignee), the timers
    that will be disarmed, and the database clock for computing new due times."""
    tasks = db.fetchall(
        SQL.facts_tasks,
        [record_id],
    )
    timers = db.fetchall(
        SQL.facts_timers,
        [record_id],
    )
    counts = db.fetchall(
        SQL.facts_counts,
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
