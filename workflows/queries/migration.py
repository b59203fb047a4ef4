"""Reads for the migration of parked runs (the Migrate dialog and the bulk API): positions,
the runs at one, migration records and their items, what Apply will do.

The engine's ``migration`` package computes them (imported where used, so a page that only
reads runs does not load the engine); callers go through the package
(``from workflows import queries``), which re-exports these.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from workflows.exceptions import MigrationIllegalState
from workflows.models import MigrationItem, MigrationRecord, MigrationRecordStatus


def migration_positions(*, scope: str, definition_id: str, version: int) -> list[Any]:
    """Where runs of one revision are parked: one row per (node, kind) with its count, from one
    GROUP BY over the open parks' partial index (never a row per run)."""
    from workflows.engine import migration

    return migration.positions(scope=scope, definition_id=definition_id, version=int(version))


def migration_positions_by_revision(*, scope: str, definition_id: str) -> dict[int, list[Any]]:
    """The positions of every revision of a definition in a scope, from one GROUP BY over the
    open parks' covering index: {version: [Position(node, kind, runs, oldest)]}."""
    from workflows.engine import migration

    return migration.positions_by_revision(scope=scope, definition_id=definition_id)


def parked_by_version(*, definition_id: str) -> dict[tuple[str, int], int]:
    """Parked runs per (scope, revision) of a definition, every revision included."""
    from workflows.engine import migration

    return migration.parked_by_version(definition_id=definition_id)


def parked_by_definition(*, definition_ids: Any = None) -> dict[tuple[str, str], int]:
    """Parked runs per (definition id, scope), every revision included."""
    from workflows.engine import migration

    return migration.parked_by_definition(definition_ids)


def runs_at_position(
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
    """One page of the runs parked at a position (oldest first), searchable by business key."""
    from workflows.engine import migration

    return migration.runs_at(
        scope=scope,
        definition_id=definition_id,
        version=int(version),
        node=node,
        kind=kind,
        search=search,
        offset=offset,
        limit=limit,
    )


def migration_records(
    *, scope: str | None = None, definition_id: str | None = None, previews: bool = False
) -> QuerySet[Any]:
    """Migration records, newest first: the applied ones (the bulk API's list), or with
    ``previews`` every record but the discarded ones (the records page: a preview never applied
    still holds its runs frozen, so the page must show it, and paused or closed ones too)."""
    if previews:
        qs = MigrationRecord.objects.exclude(status=MigrationRecordStatus.DISCARDED)
    else:
        qs = MigrationRecord.objects.filter(status__in=[MigrationRecordStatus.APPLYING, MigrationRecordStatus.DONE])
    qs = qs.order_by("-created_at", "-id")
    if scope is not None:
        qs = qs.filter(scope=scope)
    if definition_id is not None:
        qs = qs.filter(definition_id=definition_id)
    return qs


def migration_open_previews(*, scope: str, definition_id: str) -> list[Any]:
    """The previews of a definition in a scope that were neither applied nor discarded, newest
    first: each holds its runs frozen, so no other preview can take them until it is applied
    or discarded (the Migrate dialog lists them so a preview left behind is found again)."""
    return list(
        MigrationRecord.objects.filter(
            scope=scope, definition_id=definition_id, status=MigrationRecordStatus.PREVIEWED
        ).order_by("-created_at", "-id")
    )


def migration_record(*, record_id: Any) -> Any:
    """One migration record; MIGRATION_ILLEGAL_STATE when there is none."""
    try:
        return MigrationRecord.objects.get(pk=int(record_id))
    except (MigrationRecord.DoesNotExist, ValueError, TypeError):
        raise MigrationIllegalState("migration record not found") from None


def migration_items(*, record_id: Any, status: str | None = None) -> QuerySet[Any]:
    """The runs of a migration record with their outcome, in the order they were frozen."""
    qs = MigrationItem.objects.filter(record_id=record_id).select_related("run").order_by("id")
    if status:
        qs = qs.filter(status=status)
    return qs


def migration_row_facts(*, record_id: Any) -> list[dict[str, Any]]:
    """Per frozen row: approvals to withdraw (by assignee), timers to disarm, counts by status."""
    from workflows.engine import migration

    return migration.row_facts(record_id=int(record_id))


def migration_plan(*, scope: str, definition_id: str, version: int) -> Any:
    """The plan of a revision for the Migrate dialog (None when this node cannot build it)."""
    from workflows.engine import migration

    return migration.plan_of(scope, definition_id, int(version))


def migration_target_facts(*, scope: str, definition_id: str, version: int, node: str) -> dict[str, Any]:
    """What entering ``node`` of a revision fresh will do (assignee, title, due, timers)."""
    from workflows.engine import migration

    plan = migration.plan_of(scope, definition_id, int(version))
    return migration.describe_target(plan.steps.get(node) if plan is not None else None)
