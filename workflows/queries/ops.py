"""Operations: the dashboard, the stuck-run radar and the metrics gauges.

Every age and "overdue" below is computed on the database clock (now()), never the web
node's. Record captures are counted by the capture app itself (``capture.queries``), asked
for by name when it is installed: workflows never imports capture. Callers go through the
package (``from workflows import queries``), which re-exports these. Statements:
``workflows/queries/sql/ops.sql``.
"""

from __future__ import annotations

import importlib
import json
import uuid
from typing import Any

from workflows.engine import sql
from workflows.models import CommandStatus, Run
from workflows.queries.sql import QUERIES_SQL_DIR

SQL = sql.load("ops", QUERIES_SQL_DIR)
# rows of each radar list on the page (most urgent first; total_rows says how many in all)
RADAR_LIMIT = 100
# closed waits per position that make its threshold (the latest ones of the window)
RADAR_SAMPLE = 1000


def _ops_dicts(statement: str, params: Any = None) -> list[dict[str, Any]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        names = [c.name for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def queue_health() -> dict[str, Any]:
    """The command queue at a glance, one statement over the unsettled/attention statuses only
    (settled commands are never counted, so the cost follows the backlog, not the history).

    ``pending`` is due now, ``scheduled`` is PENDING but not yet due (timers); ``oldest_pending_seconds``
    is how long the oldest due command has waited to run; ``expired_leases`` are claims whose
    holder stopped (the sweep returns them)."""
    return _ops_dicts(SQL.queue_health)[0]


def runs_by_revision() -> list[dict[str, Any]]:
    """Runs per (definition, scope, revision, status) with the revision's ``plan_hash``, newest
    revision first. Runs that are not ended (FAILED included) are counted now; ended ones come
    from the snapshot the beat task ``workflows.run_totals`` refreshes
    (``operations.run_totals_refresh``), their rows carrying its ``counted_at`` (None on the
    live rows). Without a snapshot there are no ended rows: the dashboard stores one first."""
    return _ops_dicts(SQL.runs_by_revision)


def parked_by_position() -> list[dict[str, Any]]:
    """Parked runs per position (revision + node), main path only — the count the Migrate
    dialog moves, so FAILED runs left out — from the partial index of open parks; with the
    oldest wait's age."""
    from workflows.engine.migration import OLDEST_AT_POSITION, counted_positions

    return _ops_dicts(
        "SELECT c.definition_id, c.scope, c.version, c.node, c.kind, c.runs, "
        f"EXTRACT(EPOCH FROM now() - {OLDEST_AT_POSITION})::float AS oldest_seconds FROM "
        + counted_positions("true", "true")
        + " ORDER BY c.definition_id, c.scope, c.version DESC, c.node"
    )


def settled_per_minute(*, minutes: int = 60) -> list[dict[str, Any]]:
    """Commands settled per minute over the last ``minutes`` (every minute present, zeros
    included), split into ``failed`` (FAILED) and ``settled`` (all)."""
    minutes = max(1, min(int(minutes), 24 * 60))
    return _ops_dicts(SQL.settled_per_minute, [minutes - 1, minutes - 1])


def revision_plan(*, scope: str, definition_id: str, version: int, plan_hash: str) -> Any:
    """The plan of a revision for its picture (None when it cannot be built here)."""
    from workflows.definitions import cache
    from workflows.exceptions import WorkflowError

    try:
        return cache.get_plan(scope=scope, definition_id=definition_id, version=version, expected_hash=plan_hash)
    except WorkflowError:
        return None


def stuck_parks(
    *,
    percentile: float = 0.95,
    window_days: int = 30,
    floor_seconds: float = 3600,
    overrides: dict[str, float] | None = None,
    limit: int = RADAR_LIMIT,
    sample: int = RADAR_SAMPLE,
) -> list[dict[str, Any]]:
    """Open parks of live runs that have waited longer than their position's threshold.

    The threshold of a position (definition id + node, every revision and scope of it: a step
    keeps its id across revisions, and a new revision has no history yet) is, in this order:
    ``overrides["<definition id>:<node>"]``, ``overrides["<definition id>"]``, else the
    ``percentile`` of the latest ``sample`` waits at that position that closed in the last
    ``window_days`` (left by a signal, decision, timer... — moved and cancelled waits are not
    waits that ended on their own), never below ``floor_seconds``. Most overdue (waited / threshold) first."""
    return _ops_dicts(
        SQL.stuck_parks,
        {
            "pct": float(percentile),
            "days": int(window_days),
            "floor": float(floor_seconds),
            "overrides": json.dumps({str(k): float(v) for k, v in (overrides or {}).items()}),
            "limit": int(limit),
            "sample": int(sample),
        },
    )


def stuck_commands(*, stuck_after_seconds: float, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """Unsettled commands (PENDING, DEFERRED, CLAIMED) that have been due for longer than
    ``stuck_after_seconds`` — a timer due next week is not stuck, one due an hour ago is."""
    return _ops_dicts(SQL.stuck_commands, [float(stuck_after_seconds), int(limit)])


def commands_in_status(*, status: str, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """DEAD (dead letters) or OUTCOME_UNKNOWN commands with their run, oldest first."""
    if status not in (CommandStatus.DEAD, CommandStatus.OUTCOME_UNKNOWN):
        raise ValueError("status must be DEAD or OUTCOME_UNKNOWN")
    return _ops_dicts(SQL.commands_in_status, [status, int(limit)])


def overdue_tasks(*, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """OPEN tasks past their due date, most overdue first."""
    return _ops_dicts(SQL.overdue_tasks, [int(limit)])


def runs_for_action(*, run_ids: Any) -> list[Run]:
    """The runs a bulk action would touch (unknown or malformed ids left out), oldest first."""
    ids = []
    for value in run_ids:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return list(Run.objects.filter(pk__in=ids).order_by("created_at", "id"))


def task_counts() -> dict[str, int]:
    """Open tasks (OPEN or COMPLETING) and, of them, the OPEN ones past their due date."""
    return _ops_dicts(SQL.task_counts)[0]


def live_run_counts() -> dict[str, int]:
    """Runs that are not ended, by status (FAILED included: it waits for a retry)."""
    rows = _ops_dicts(SQL.live_run_counts)
    return {r["status"]: int(r["runs"]) for r in rows}


def reconcile_candidate(*, command_id: Any) -> dict[str, Any] | None:
    """A command with its run and the step of its latest effect marker, for the reconcile page
    (None when there is no such command)."""
    try:
        command_id = int(command_id)
    except (TypeError, ValueError):
        return None
    rows = _ops_dicts(SQL.reconcile_candidate, [command_id])
    return rows[0] if rows else None


def _capture_queries() -> Any:
    """Capture's own queries (``capture.queries``) when the app is installed, else None; looked
    up by name, so workflows never imports capture."""
    from django.apps import apps

    if not apps.is_installed("capture"):
        return None
    return importlib.import_module("capture.queries")


def capture_counts() -> dict[str, int]:
    """Record captures by status ({} without the capture app)."""
    capture = _capture_queries()
    return {} if capture is None else dict(capture.capture_counts())


def outcome_unknown_captures(*, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """OUTCOME_UNKNOWN record captures, oldest first ([] without the capture app)."""
    capture = _capture_queries()
    return [] if capture is None else list(capture.outcome_unknown_captures(limit=limit))
