"""Apply of a migration: MIGRATION commands recorded for a record's frozen items in bounded
batches (``MIGRATE.APPLY_BATCH``), and the record's progress.

Each batch re-checks its runs under their execution locks (taken together, without waiting);
the moves ``bulk`` can make set-based are made at once, the rest get one MIGRATION command
each, which the handler settles in its segment, writing the item's outcome. Statements:
``engine/sql/migration_apply.sql`` (the lock of a batch takes its columns from ``locks``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from django.db import DatabaseError, transaction

from workflows import conf
from workflows.engine import db, observers, rows, sql, wakeups
from workflows.engine.actors import Actor
from workflows.engine.migration import bulk
from workflows.engine.migration.handler import actor_label, parked_at
from workflows.engine.rows import RunRow
from workflows.exceptions import InvalidPayload, MigrationIllegalState, Violation
from workflows.models import (
    ENDED_STATUSES,
    ActorKind,
    CommandKind,
    MigrationItemStatus,
    MigrationRecordStatus,
    RunStatus,
)

log = logging.getLogger("workflows.engine")
SQL = sql.load("migration_apply")
LARGE_BATCH = 100  # above this many runs, Apply needs the number typed back


@dataclass(frozen=True)
class Progress:
    record_id: int
    status: str
    total: int
    counts: dict[str, int]

    @property
    def left(self) -> int:
        return self.counts.get(MigrationItemStatus.SELECTED, 0)

    @property
    def in_flight(self) -> int:
        return self.counts.get(MigrationItemStatus.RECORDED, 0)

    @property
    def not_applied(self) -> int:
        return self.counts.get(MigrationItemStatus.NOT_APPLIED, 0)

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
    Refuses: MIGRATION_ILLEGAL_STATE (discarded, paused, closed or unknown record), INVALID_PAYLOAD (a batch of
    more than 100 runs applied for the first time without ``confirm`` equal to its size).
    """
    batch = int(limit or conf.get().MIGRATE.APPLY_BATCH)
    with transaction.atomic():
        # the record row serialises concurrent Apply presses (lock order: record, then runs)
        rec = db.fetchdict(
            SQL.lock_record,
            [record_id],
        )
        if rec is None:
            raise MigrationIllegalState("migration record not found")
        if rec["status"] == MigrationRecordStatus.DISCARDED:
            raise MigrationIllegalState("the preview was discarded")
        if rec["status"] == MigrationRecordStatus.PAUSED:
            raise MigrationIllegalState("the migration is paused; resume it")
        if rec["status"] == MigrationRecordStatus.CLOSED:
            raise MigrationIllegalState("the migration was closed")
        if rec["status"] == MigrationRecordStatus.PREVIEWED:
            check_confirm(rec, confirm)
        items = db.fetchdicts(
            SQL.next_items,
            [record_id, batch],
        )
        outcomes = _record_batch(rec, items, actor) if items else []
        if outcomes:
            db.execute(
                SQL.settle_items,
                [
                    [o[0] for o in outcomes],
                    [o[1] for o in outcomes],
                    [o[2] for o in outcomes],
                    [o[3] for o in outcomes],
                ],
            )
        db.execute(
            SQL.mark_applying,
            [actor_label(actor), record_id],
        )
    return progress(record_id=record_id)


def check_confirm(rec: dict[str, Any], confirm: int | None) -> None:
    """The first Apply of more than ``LARGE_BATCH`` runs needs their number typed back."""
    if rec["total"] > LARGE_BATCH and confirm != rec["total"]:
        raise InvalidPayload(
            "a batch of more than 100 runs needs its number of runs typed as confirmation",
            violations=[
                Violation(pointer="/confirm", type="confirmation", message="type the number of runs to confirm")
            ],
        )


# The execution locks of a batch of runs, taken together without waiting: a run whose lock is
# busy (a segment, an approver's completion, a cancel) is skipped and stays for the next Apply,
# so this never waits for one run's lock while holding others.
LOCK_BATCH = (
    f"SELECT {rows.RUN_COLUMNS} FROM workflow_runs WHERE id = ANY(%s::uuid[]) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED"
)


def _record_batch(
    rec: dict[str, Any], items: list[dict[str, Any]], actor: Actor
) -> list[tuple[int, str, str, int | None]]:
    """The checks of ``recording.migrate`` (ended, scope, pending migration) and the position
    check, for a whole batch in four statements; answers (item id, status, detail, command id)."""
    ids = [str(i["run_id"]) for i in items]
    locked = {str(r["id"]): cast(RunRow, r) for r in db.fetchdicts(LOCK_BATCH, [ids])}
    pending = {str(r[0]) for r in db.fetchall(SQL.migrations_pending, [list(locked)])} if locked else set()
    outcomes: list[tuple[int, str, str, int | None]] = []
    chosen: list[tuple[dict[str, Any], RunRow]] = []
    for item in items:
        run = locked.get(str(item["run_id"]))
        if run is None:
            continue  # busy right now: left SELECTED for the next Apply
        if run["status"] in ENDED_STATUSES:
            outcomes.append((item["id"], MigrationItemStatus.MOVED_ON, "ENDED", None))
        elif run["status"] == RunStatus.FAILED:
            outcomes.append((item["id"], MigrationItemStatus.REJECTED, "INSTANCE_FAILED", None))
        elif (
            run["status"] != RunStatus.WAITING
            or parked_at(run) != item["source_node"]
            or int(run["version"]) != int(rec["source_version"])
            or run["scope"] != rec["scope"]
        ):
            outcomes.append((item["id"], MigrationItemStatus.MOVED_ON, "MOVED_ON", None))
        elif str(run["id"]) in pending:
            outcomes.append((item["id"], MigrationItemStatus.MOVED_ON, "MIGRATION_PENDING", None))
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
            SQL.record_migrations,
            [
                [str(run["id"]) for _, run in chosen],
                [int(run["next_seq"]) for _, run in chosen],
                targets,
                *actor.columns(),
            ],
        )
    }
    for item, run in chosen:
        outcomes.append((item["id"], MigrationItemStatus.RECORDED, "", recorded[str(run["id"])]))
        wakeups.wake(run["id"])
        if actor.kind == ActorKind.NONE:
            observers.emit(observers.ActorAbsent(CommandKind.MIGRATION))
    return outcomes


def _move_set_based(
    rec: dict[str, Any], chosen: list[tuple[dict[str, Any], RunRow]], actor: Actor
) -> tuple[list[tuple[int, str, str, int | None]], list[tuple[dict[str, Any], RunRow]]]:
    """The moves ``bulk`` makes for the batch at once (in a savepoint: a batch it
    cannot write goes the MIGRATION command way whole)."""
    try:
        with transaction.atomic():
            return bulk.move(rec, chosen, actor)
    except DatabaseError as exc:
        if db.is_transient(exc):
            raise
        log.warning("a set-based move of migration %s failed; its runs get MIGRATION commands", rec["id"])
        return [], chosen


def progress(*, record_id: int) -> Progress:
    """Where a record stands: item counts by status; finishes the record when nothing is left."""
    with transaction.atomic():
        db.execute(SQL.settle_items_from_commands, [record_id])
        rec = db.fetchdict(SQL.record_status, [record_id])
        if rec is None:
            raise MigrationIllegalState("migration record not found")
        counts = {
            str(s): int(n)
            for s, n in db.fetchall(
                SQL.item_counts,
                [record_id],
            )
        }
        status = rec["status"]
        if (
            status in (MigrationRecordStatus.APPLYING, MigrationRecordStatus.PAUSED)
            and not counts.get(MigrationItemStatus.SELECTED)
            and not counts.get(MigrationItemStatus.RECORDED)
        ):
            db.execute(
                SQL.finish_record,
                [record_id],
            )
            status = MigrationRecordStatus.DONE
    return Progress(record_id=record_id, status=status, total=int(rec["total"]), counts=counts)
