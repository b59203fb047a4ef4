"""Where runs are parked: counts per position (revision, node, kind) and the runs at one.

Counts come from workflow_park_counts, which a trigger keeps with every park opened and
closed (migration 0008): a position costs its stripes (at most 16 rows), not its runs. The
oldest wait of a position is the first entry of the partial index workflow_park_open
(definition_id, scope, version, node, kind, since WHERE left_at IS NULL AND branch_id = '').

A FAILED run keeps the park of the wait it failed in (a retry returns it there), but it
cannot be moved (a migration of a failed run is rejected), so it is not counted as parked:
the open parks of the definition's FAILED runs — few, found through the runs' pin index and
the parks' run index — are taken off the counts, and left out of the oldest wait, the
picker and the frozen selection (``preview``). The fragments are in
``engine/sql/migration_positions.sql``; the counts are composed here with their WHERE clauses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workflows.engine import db, sql
from workflows.models import RunStatus

_SQL = sql.load("migration_positions")
NOT_FAILED = _SQL.not_failed
OLDEST_AT_POSITION = _SQL.oldest_at_position


def counted_positions(where: str, failed_where: str) -> str:
    """The open main-path parks per position (``where`` over workflow_park_counts), less
    those of FAILED runs (``failed_where`` over their runs ``r``): a subquery ``c`` of
    (definition_id, scope, version, node, kind, runs) with runs > 0."""
    return _SQL.counted_positions.format(where=where, failed_where=failed_where)


# positions:
# One row per position of a revision that holds parked runs.
POSITIONS = (
    f"SELECT c.node, c.kind, c.runs, {OLDEST_AT_POSITION} AS oldest FROM "
    + counted_positions(
        "definition_id = %(d)s AND scope = %(s)s AND version = %(v)s",
        "r.definition_id = %(d)s AND r.scope = %(s)s AND r.version = %(v)s",
    )
    + " ORDER BY c.node, c.kind"
)

# positions by revision:
# The positions of every revision of a definition (the dialog reads its header and its rows
# from this one statement).
POSITIONS_BY_REVISION = (
    f"SELECT c.version, c.node, c.kind, c.runs, {OLDEST_AT_POSITION} AS oldest FROM "
    + counted_positions("definition_id = %(d)s AND scope = %(s)s", "r.definition_id = %(d)s AND r.scope = %(s)s")
    + " ORDER BY c.version, c.node, c.kind"
)

# parked by version:
# How many runs are parked per revision of a definition (every revision, the current one too).
PARKED_BY_VERSION = (
    "SELECT c.scope, c.version, sum(c.runs) FROM "
    + counted_positions("definition_id = %(d)s", "r.definition_id = %(d)s")
    + " GROUP BY c.scope, c.version"
)

# parked by definition (a template: {counted} is a counted_positions subquery):
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
        f"AND p.kind = %s AND p.branch_id = '' AND r.status <> '{RunStatus.FAILED.value}'"
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
