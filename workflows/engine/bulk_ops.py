"""Bulk operations: one action over a frozen selection of runs, applied in bounded batches.

Why rows and not a loop in memory: a bulk cancel of ten thousand runs outlives any one
request, message or worker. ``freeze`` writes the record and one PENDING item per run in the
caller's transaction; ``apply_batch`` then claims the next items with ``FOR UPDATE SKIP
LOCKED``, applies the action to each run through the callable it is given (the operations
the single-run endpoints use, so history and refusals are theirs) and writes each item's
outcome in the same transaction. So:

- a repeated message finds the items gone from PENDING (or held by the other batch, and
  skipped): no run gets the action twice;
- a killed worker's batch rolls back whole (the actions with it): its items are PENDING again
  and the next batch takes them, none skipped; the sweep resumes an open record whose
  ``updated_at`` (the last committed batch) is older than ``BULK.STALLED_SECONDS``;
- a refusal on one run (already ended, nothing to retry, undeclared signal) is that item's
  outcome (REFUSED with the error's code and its framework text), never the record's; each
  run is applied in a savepoint, so a refusal leaves nothing of itself behind. A transient
  failure (LOCK_TIMEOUT, a deadlock, a lost connection) leaves the item PENDING with one more
  attempt, and FAILED after ``EXECUTOR.MAX_ATTEMPTS``.

A batch holds the execution locks of the runs it has applied until it commits, and waits for
the next run's lock at most ``LOCK_TIMEOUT_MS``: the executor only ever try-locks, so it never
waits on a batch, and a batch is bounded (``BULK.BATCH``) so it holds few locks for little
time. The engine does not know Celery: the app registers a notifier (``set_notifier``) that
the record's creation wakes after commit. Statements: ``engine/sql/bulk_ops.sql``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, transaction

from workflows.engine import db, faults, sql
from workflows.engine.actors import Actor
from workflows.exceptions import WorkflowError
from workflows.models import BulkItemStatus, BulkOperation, BulkOperationStatus

log = logging.getLogger("workflows.engine")
SQL = sql.load("bulk_ops")
DETAIL_LIMIT = 255

# apply(operation row, run id) -> the id of the command recorded (None for a cancel)
Apply = Callable[[dict[str, Any], Any], int | None]

_notifier: Callable[[int], None] | None = None


def set_notifier(notifier: Callable[[int], None] | None) -> None:
    """Who is told, after commit, that an operation has work (the app's Celery task)."""
    global _notifier
    _notifier = notifier


def wake(operation_id: int) -> None:
    """Ask for the operation's batches once the current transaction commits (a lost wake-up
    is found by the sweep)."""

    def fire() -> None:
        if _notifier is not None:
            try:
                _notifier(int(operation_id))
            except Exception:  # the sweep resumes it
                log.warning("bulk operation %s: wake-up not sent", operation_id, exc_info=True)

    transaction.on_commit(fire)


def freeze(
    *,
    action: str,
    run_ids: Sequence[Any],
    selection: str,
    filter: dict[str, Any] | None,
    signal_name: str,
    signal_payload: Any,
    reason: str,
    actor: Actor,
) -> int:
    """Write the record and one PENDING item per run (existing runs, no duplicates: the
    caller checked) in the caller's transaction; answers the record's id. An empty selection
    is DONE at once; any other is woken after commit."""
    record = BulkOperation.objects.create(
        action=action,
        selection=selection,
        filter=filter,
        signal_name=signal_name,
        signal_payload=signal_payload,
        reason=reason,
        total=len(run_ids),
        actor_kind=actor.kind,
        actor_id=actor.id,
        actor_reason=actor.reason,
        on_behalf_of=actor.on_behalf_of,
        attribution_status=actor.status,
    )
    if run_ids:
        db.execute(SQL.insert_items, [record.id, [str(r) for r in run_ids]])
        wake(record.id)
    else:
        db.execute(SQL.finish, [record.id])
    return int(record.id)


def actor_of(operation: dict[str, Any]) -> Actor:
    """Who asked for the operation: every run's history names them, not the worker."""
    return Actor(
        kind=operation["actor_kind"],
        id=operation["actor_id"],
        reason=operation["actor_reason"],
        on_behalf_of=operation["on_behalf_of"],
        status=operation["attribution_status"],
    )


def operation(operation_id: int) -> dict[str, Any] | None:
    return db.fetchdict(SQL.operation, [int(operation_id)])


@dataclass(frozen=True)
class Batch:
    """What one batch did: how many items it claimed, and whether the operation is DONE."""

    claimed: int
    done: bool


def apply_batch(*, operation_id: int, apply: Apply, size: int, max_attempts: int) -> Batch:
    """Claim up to ``size`` PENDING items, apply the action to each run (a savepoint each),
    write the outcomes and mark the operation's progress, in the caller's transaction.
    An unknown or DONE operation is a batch of nothing, done."""
    found = operation(operation_id)
    if found is None or found["status"] == BulkOperationStatus.DONE:
        return Batch(0, True)
    items = db.fetchdicts(SQL.claim_items, [found["id"], int(size)])
    columns: list[list[Any]] = [[], [], [], [], [], []]
    for item in items:
        status, code, detail, command_id, attempts = _apply_one(found, item, apply, max_attempts)
        for column, value in zip(columns, (item["id"], status, code, detail, command_id, attempts), strict=True):
            column.append(value)
    if items:
        faults.point("bulk_before_settle")  # the runs applied, their items not yet written
        db.execute(SQL.settle_items, columns)
        db.execute(SQL.progressed, [found["id"]])
    done = db.fetchone(SQL.finish, [found["id"]]) is not None
    return Batch(len(items), done)


def _apply_one(
    found: dict[str, Any], item: dict[str, Any], apply: Apply, max_attempts: int
) -> tuple[str, str, str, int | None, int]:
    """(status, code, detail, command id, attempts) of one item, its action applied or refused
    in a savepoint (a refusal rolls back whatever it wrote)."""
    attempts = int(item["attempts"]) + 1
    try:
        with transaction.atomic():
            command_id = apply(found, item["run_id"])
    except WorkflowError as error:
        detail = str(error.message)[:DETAIL_LIMIT]
        if not error.retryable:
            return BulkItemStatus.REFUSED, error.code, detail, None, attempts
        if attempts < max_attempts:
            return BulkItemStatus.PENDING, error.code, detail, None, attempts
        return BulkItemStatus.FAILED, error.code, detail, None, attempts
    except DatabaseError:  # not mapped by the operation: treat as transient
        log.warning("bulk operation %s: run %s failed", found["id"], item["run_id"], exc_info=True)
        status = BulkItemStatus.PENDING if attempts < max_attempts else BulkItemStatus.FAILED
        return status, "PERSISTENCE", "a database failure", None, attempts
    except Exception:  # a defect: the run is left alone, the rest of the operation goes on
        log.exception("bulk operation %s: run %s failed", found["id"], item["run_id"])
        return BulkItemStatus.FAILED, "INTERNAL", "an unexpected error; see the server log", None, attempts
    return BulkItemStatus.APPLIED, "", "", command_id, attempts


def stalled(*, idle_seconds: float, limit: int = 100) -> list[int]:
    """Open operations without a committed batch for ``idle_seconds`` and no resuming message
    queued, each leased (``enqueued_until``, ``idle_seconds``) to the message the caller (the
    sweep) sends: at most one queued per operation; a lost one is sent again after its lease."""
    rows = db.fetchall(SQL.stalled, {"idle": float(idle_seconds), "limit": int(limit)})
    return sorted(int(row[0]) for row in rows)


def counts(operation_id: int) -> dict[str, int]:
    """The operation's items by status, every status named (0 when none)."""
    found = {str(status): int(n) for status, n in db.fetchall(SQL.counts, [int(operation_id)])}
    return {status: found.get(status, 0) for status in BulkItemStatus.values}
