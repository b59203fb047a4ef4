"""Background apply of a migration record: one press hands the frozen runs to a task that
applies them in bounded batches, and an operator can pause, resume or close it.

Apply pressed (``start``) marks the record APPLYING *in the background* and asks, after
commit, for a task (``notify``; the app connects Celery). The task (``run``) takes the record
under a lease (``lease_token``, ``lease_until`` on the database clock) and applies batch after
batch with ``apply.apply_batch`` — each batch its own transaction, its runs locked with
``SKIP LOCKED`` and its items moved out of SELECTED in the same transaction as the runs'
writes — so a batch that dies half way (a killed worker, a lost connection) leaves its items
SELECTED and its runs untouched, and the next batch takes them again: no run is moved twice and
none is skipped. The lease is renewed after every batch. A repeated message finds the record
held and does nothing; a record whose holder died keeps its lease until it lapses, and then
the beat sweep (``due``) hands it to a new task, which carries on where the last committed
batch stopped.

Pause, resume and close take the record's row lock (the lock every batch takes first), so a
batch is either wholly before or wholly after them. A paused or closed record is refused by
``apply_batch``; closing needs a reason and marks the runs not applied yet NOT_APPLIED (runs
already handed to the executor keep their MIGRATION command and get its outcome).
Statements: ``engine/sql/migration_background.sql``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connection, transaction

from workflows import conf
from workflows.engine import db, sql
from workflows.engine.actors import Actor
from workflows.engine.migration.apply import Progress, apply_batch, check_confirm, progress
from workflows.engine.migration.handler import actor_label
from workflows.engine.reconcile import clean_reason
from workflows.exceptions import InvalidPayload, MigrationIllegalState, Violation
from workflows.models import MigrationRecordStatus

log = logging.getLogger("workflows.engine")
SQL = sql.load("migration_background")
IDLE_RECHECK_SECONDS = 1.0  # only runs the executor still applies are left: look again this soon
BUSY_PAUSE_SECONDS = 0.2  # a batch found every run it took busy: give their locks a moment

_notifier: Callable[[list[int]], None] | None = None


def set_notifier(notifier: Callable[[list[int]], None] | None) -> None:
    """The app's way to start a task for records (``workflows.tasks`` connects Celery)."""
    global _notifier
    _notifier = notifier


def notify(record_id: int) -> None:
    """Ask for a task for this record after the current transaction commits. A message that
    is lost costs one lease time: the sweep finds the record by its lapsed lease."""

    def send() -> None:
        if _notifier is None:
            return
        try:
            _notifier([int(record_id)])
        except Exception:  # the sweep is the backstop
            log.warning("the task for migration %s was not sent; the sweep will", record_id, exc_info=True)

    transaction.on_commit(send)


def _lease_seconds() -> int:
    return int(conf.get().EXECUTOR.LEASE_SECONDS)


def _lock(record_id: int) -> dict[str, Any]:
    rec = db.fetchdict(SQL.lock_record, [record_id])
    if rec is None:
        raise MigrationIllegalState("migration record not found")
    return rec


def start(*, record_id: int, actor: Actor, confirm: int | None = None) -> Progress:
    """Apply a previewed record in the background (the press answers at once; a task applies).

    Refuses: MIGRATION_ILLEGAL_STATE (unknown, discarded, paused, closed or finished record),
    INVALID_PAYLOAD (more than 100 runs without ``confirm`` equal to their number).
    """
    rec = _lock(record_id)
    status = rec["status"]
    if status == MigrationRecordStatus.DISCARDED:
        raise MigrationIllegalState("the preview was discarded")
    if status == MigrationRecordStatus.PAUSED:
        raise MigrationIllegalState("the migration is paused; resume it")
    if status in (MigrationRecordStatus.CLOSED, MigrationRecordStatus.DONE):
        raise MigrationIllegalState("the migration is over")
    if status == MigrationRecordStatus.PREVIEWED:
        check_confirm(rec, confirm)
    db.execute(
        SQL.start,
        [actor_label(actor), db.jsonb(_actor_json(actor)), _lease_seconds(), record_id],
    )
    notify(record_id)
    return progress(record_id=record_id)


def pause(*, record_id: int, actor: Actor) -> Progress:
    """Stop applying after the batch under way (if any). Refuses MIGRATION_ILLEGAL_STATE when
    the record is not applying."""
    rec = _lock(record_id)
    if rec["status"] != MigrationRecordStatus.APPLYING:
        raise MigrationIllegalState("only a migration being applied can be paused")
    db.execute(SQL.pause, [actor_label(actor), record_id])
    return progress(record_id=record_id)


def resume(*, record_id: int, actor: Actor) -> Progress:
    """Continue a paused record in the background. Refuses MIGRATION_ILLEGAL_STATE when it is
    not paused."""
    rec = _lock(record_id)
    if rec["status"] != MigrationRecordStatus.PAUSED:
        raise MigrationIllegalState("only a paused migration can be resumed")
    db.execute(SQL.resume, [db.jsonb(_actor_json(actor)), _lease_seconds(), record_id])
    notify(record_id)
    return progress(record_id=record_id)


def close(*, record_id: int, actor: Actor, reason: str) -> Progress:
    """Close an applying or paused record as partially applied: the runs not applied yet are
    marked NOT_APPLIED and stay where they are. The reason is required and kept on the record.

    Refuses: INVALID_PAYLOAD (blank reason), MIGRATION_ILLEGAL_STATE (not applying or paused).
    """
    cleaned = clean_reason(reason)
    if not cleaned:
        raise InvalidPayload(
            "a reason is required",
            violations=[Violation(pointer="/reason", type="required", message="a reason is required")],
        )
    rec = _lock(record_id)
    if rec["status"] not in (MigrationRecordStatus.APPLYING, MigrationRecordStatus.PAUSED):
        raise MigrationIllegalState("only a migration being applied or paused can be closed")
    db.execute(SQL.close_items, [record_id])
    db.execute(SQL.close, [actor_label(actor), cleaned, record_id])
    return progress(record_id=record_id)


def due(*, limit: int = 100) -> list[int]:
    """Records applying in the background that no live task holds (for the sweep), each leased
    to the message the sweep sends (one lease time): at most one queued per record."""
    return sorted(int(r[0]) for r in db.fetchall(SQL.due, {"lease": _lease_seconds(), "limit": limit}))


def run(*, record_id: int, budget_seconds: float, batch: int | None = None) -> str:
    """Apply a background record batch by batch while this task holds its lease, for at most
    ``budget_seconds``. Answers what happened: ``held`` (another task has it, or it is not
    applying), ``done``, ``stopped`` (paused or closed meanwhile, or the lease was lost),
    ``waiting`` (only runs the executor applies are left), ``more`` (the budget ran out; the
    caller sends the next task)."""
    token = uuid.uuid4().hex
    lease = _lease_seconds()
    with transaction.atomic():
        claimed = db.fetchone(SQL.claim, [token, lease, record_id])
    if claimed is None:
        return "held"
    actor = _actor_from(claimed[0])
    deadline = time.monotonic() + budget_seconds
    outcome = "more"
    left_before = -1
    try:
        while True:
            try:
                with transaction.atomic():
                    state: Progress | None = apply_batch(record_id=record_id, actor=actor, limit=batch)
            except MigrationIllegalState:
                outcome = "stopped"  # paused, closed or discarded under the record's lock
                return outcome
            except DatabaseError as exc:
                if not db.is_transient(exc):
                    raise
                log.warning("a batch of migration %s failed (transient); it is taken again", record_id)
                _reset_connection()
                state = None
            if state is not None and not state.left:
                outcome = "done" if state.status == MigrationRecordStatus.DONE else "waiting"
                return outcome
            with transaction.atomic():
                held = db.fetchone(SQL.renew, [lease, record_id, token])
            if held is None:
                outcome = "stopped"
                return outcome
            if time.monotonic() > deadline:
                return outcome
            if state is None or state.left == left_before:  # every run it took was busy
                time.sleep(BUSY_PAUSE_SECONDS)
            left_before = state.left if state is not None else left_before
    except BaseException:
        outcome = "failed"  # no next message follows: the sweep may send one at once
        raise
    finally:
        # "more": the caller sends the next message now, which the lease covers (no second
        # one from the sweep while it is queued); "waiting": looked at again soon
        again = {"waiting": IDLE_RECHECK_SECONDS, "more": float(lease)}.get(outcome, 0.0)
        try:
            with transaction.atomic():
                db.execute(SQL.release, [again, record_id, token])
        except DatabaseError:  # the lease lapses by itself
            log.warning("the lease of migration %s was not released", record_id, exc_info=True)


def _reset_connection() -> None:
    try:
        connection.close()
    except DatabaseError:
        pass


def _actor_json(actor: Actor) -> dict[str, str]:
    return {
        "kind": actor.kind,
        "id": actor.id,
        "reason": actor.reason,
        "on_behalf_of": actor.on_behalf_of,
        "status": actor.status,
    }


def _actor_from(data: Any) -> Actor:
    if not isinstance(data, dict):
        return Actor()
    known = ("kind", "id", "reason", "on_behalf_of", "status")
    return Actor(**{k: str(data[k]) for k in known if data.get(k) is not None and data.get(k) != ""})
