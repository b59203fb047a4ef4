"""The execution lock: one transaction at a time changes a run.

The lock is the run row itself, taken ``FOR NO KEY UPDATE`` (so inserts of rows that
reference the run, which take ``FOR KEY SHARE``, never queue behind it). Recording paths
wait at most ``LOCK_TIMEOUT_MS`` and then fail retryably; executor connections never wait
(``NOWAIT``). Lock order everywhere: a run's row before its commands, tasks and timers; a
caller run before its children (teardown goes top-down).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, cast
from uuid import UUID

from django.db import DatabaseError, connection

from workflows import conf
from workflows.engine import db, pipeline, rows, sql
from workflows.engine.rows import CommandRow, RunRow
from workflows.exceptions import InstanceNotFound, LockTimeout
from workflows.models import CommandKind

SQL = sql.load("locks")
LOCK_RUN = rows.with_columns(SQL.lock_run)
RESTORE_LOCK_TIMEOUT = SQL.restore_lock_timeout
TRY_LOCK_RUN = rows.with_columns(SQL.try_lock_run)
LOCK_WITH_COMMAND = rows.with_columns(SQL.lock_with_command)
TASK_OF_COMMAND = SQL.task_of_command
LOCK_WITH_CLAIMED = rows.with_columns(SQL.lock_with_claimed)
TASK_OF_CLAIMED = SQL.task_of_claimed
# what a deciding COMPLETION's run holds beside it, read with the lock (teardown's fragments)
OPEN_THINGS_BESIDE_THE_DECISION = sql.load("teardown").open_things_beside_the_decision
OPEN_THINGS_BESIDE_A_CLAIMED_DECISION = sql.load("teardown").open_things_beside_a_claimed_decision


class Busy(Exception):
    """A run's execution lock is held by another transaction (an executor never waits on it:
    its segment rolls back and is tried again, ``executor._execute``)."""


@contextmanager
def _waiting_lock() -> Iterator[None]:
    """A lock wait that timed out (or deadlocked) is the run being busy: retry the transaction."""
    try:
        yield
    except DatabaseError as exc:
        if db.sqlstate(exc) in (db.LOCK_NOT_AVAILABLE, db.DEADLOCK):
            raise LockTimeout("the run is busy; retry the whole transaction") from None
        raise


def _locked(data: dict[str, Any] | None) -> RunRow:
    if data is None:
        raise InstanceNotFound("run not found")
    data.pop("_bound", None)
    data.pop("_kept", None)
    return cast(RunRow, data)


def lock_run_and_read(run_id: UUID | str, sql: str, params: list[Any]) -> tuple[RunRow, dict[str, Any] | None]:
    """:func:`lock_run`, and one read under the lock in the same round trip (the read runs
    after the lock is held, with a snapshot of its own): (run, the read's first row or None)."""
    timeout_ms = conf.get().RECORDING.LOCK_TIMEOUT_MS
    with _waiting_lock():
        # the read under the same bound (a row of the run, locked after it), then the restore
        data, row, _ = pipeline.fetchdict_batch(
            [(LOCK_RUN, [f"{int(timeout_ms)}ms", run_id]), (sql, params), (RESTORE_LOCK_TIMEOUT, ())]
        )
    return _locked(data), row


def lock_run(run_id: UUID | str) -> RunRow:
    """Take the run's execution lock for the caller's transaction (waits ≤ LOCK_TIMEOUT_MS).
    The caller's lock_timeout is back in force once the lock is held (``LOCK_RUN``)."""
    timeout_ms = conf.get().RECORDING.LOCK_TIMEOUT_MS
    with _waiting_lock():
        data, _ = pipeline.fetchdict_batch([(LOCK_RUN, [f"{int(timeout_ms)}ms", run_id]), (RESTORE_LOCK_TIMEOUT, ())])
    return _locked(data)


def lock_called_run(run_id: UUID | str, *, executor: bool) -> RunRow:
    """Lock a run this run called, to tear it down (caller before child: the lock order). A
    recording (``executor`` False: a cancel through the API) waits at most LOCK_TIMEOUT_MS;
    an executor's segment never waits: a busy called run raises ``Busy`` (the transaction is
    aborted) and the segment is tried again once the lock may be free."""
    if not executor:
        return lock_run(run_id)
    try:
        (data,) = pipeline.fetchdict_batch([(TRY_LOCK_RUN, [run_id])])
    except DatabaseError as exc:
        if db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
            from django.db import transaction

            transaction.set_rollback(True)
            raise Busy() from None
        raise
    if data is None:
        raise InstanceNotFound("run not found")
    return cast(RunRow, data)


def try_lock_run(run_id: UUID | str, *, first: bool = True) -> RunRow | None:
    """Take the execution lock only if it is free (executor paths never wait). None if busy.

    A busy lock raises inside PostgreSQL and aborts the transaction. Executor transactions
    take the lock as their first statement (``first=True``), so the caller just rolls the
    whole (empty) transaction back; elsewhere a savepoint keeps the transaction usable.
    """
    from contextlib import nullcontext

    from django.db import transaction

    try:
        with nullcontext() if first else transaction.atomic(), connection.cursor() as cur:
            cur.execute(TRY_LOCK_RUN, [run_id])
            row = cur.fetchone()
            if row is not None:
                cols, json_columns = pipeline.shape(cur, TRY_LOCK_RUN)
                row = pipeline.decode_row(row, json_columns)
    except DatabaseError as exc:
        if db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
            if first and connection.in_atomic_block:
                transaction.set_rollback(True)  # the transaction is aborted: roll it back, never commit
            return None
        raise
    if row is None:
        raise InstanceNotFound("run not found")
    return cast(RunRow, dict(zip(cols, row, strict=True)))


def try_lock_run_with_command(
    run_id: Any, command_id: int, token: Any, statement_timeout_ms: int, *, with_task: bool = False
) -> tuple[RunRow | None, CommandRow | None]:
    """The segment's first statement: try-lock the run, read our claimed command (None when
    the claim no longer stands) and set the statement deadline. (None, None) when busy.
    ``with_task`` (a COMPLETION) also locks and reads the command's task in the same round
    trip, answered as the command's ``_task`` (None when there is none), and what the run holds
    besides that task and its wait's park (``_open_beside``: see ``waits.leave``)."""
    from django.db import transaction

    statements: list[tuple[str, Any]] = [
        (LOCK_WITH_COMMAND, [f"{int(statement_timeout_ms)}ms", command_id, token, command_id, run_id])
    ]
    if with_task:
        statements.append((TASK_OF_COMMAND, [command_id]))
        statements.append((OPEN_THINGS_BESIDE_THE_DECISION, {"r": run_id, "c": command_id}))
    try:
        rows = pipeline.fetchdict_batch(statements)
    except DatabaseError as exc:
        if db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
            if connection.in_atomic_block:
                transaction.set_rollback(True)
            return None, None
        raise
    return _locked_with_command(rows, with_task=with_task)


def _locked_with_command(rows: list[dict[str, Any] | None], *, with_task: bool) -> tuple[RunRow, CommandRow | None]:
    data = rows[0]
    if data is None:
        raise InstanceNotFound("run not found")
    data.pop("_deadline", None)
    command = data.pop("_command", None)
    if command is not None and with_task:
        command["_task"] = rows[1]
        command["_open_beside"] = rows[2]
    more = bool(data.pop("_more", False))
    if command is not None:
        command["_more"] = more  # other runnable commands queued for this run (the executor loops)
        from datetime import datetime

        for key in ("recorded_at", "fire_at"):
            if command.get(key):
                command[key] = datetime.fromisoformat(command[key])
    return cast(RunRow, data), cast(CommandRow | None, command)


class Claimed(NamedTuple):
    """What ``claim_and_lock`` found: the claim statement's row; the run (None when its lock
    was busy) and the claimed command (None when no command holds the token)."""

    claim: dict[str, Any] | None
    run: RunRow | None
    command: CommandRow | None
    error: DatabaseError | None  # a failure after the claim (the claim stands)


def claim_and_lock(claim_sql: str, claim_params: Any, run_id: Any, token: Any, statement_timeout_ms: int) -> Claimed:
    """Inside a segment's ``transaction.atomic()`` that has sent nothing yet: the claim (its own
    transaction, committed first) and the segment's first statements — try-lock the run, read
    the command holding ``token``, a COMPLETION's task and what the run holds beside it — in
    one round trip. Raises when the claim itself failed (nothing committed)."""
    from django.db import transaction

    params = {"r": run_id, "t": token}
    claim, rows, error = pipeline.committed_then_batch(
        (claim_sql, claim_params),
        [
            (LOCK_WITH_CLAIMED, {**params, "timeout": f"{int(statement_timeout_ms)}ms"}),
            (TASK_OF_CLAIMED, params),
            (OPEN_THINGS_BESIDE_A_CLAIMED_DECISION, params),
        ],
    )
    if error is not None:
        transaction.set_rollback(True)
        if db.sqlstate(error) == db.LOCK_NOT_AVAILABLE:
            return Claimed(claim, None, None, None)
        return Claimed(claim, None, None, error)
    if rows[0] is None:  # no such run (a wake-up naming a run never stored, or purged): nothing claimed
        transaction.set_rollback(True)
        return Claimed(claim, None, None, None)
    run, command = _locked_with_command(rows, with_task=True)
    if command is not None and command["kind"] != CommandKind.COMPLETION:
        command.pop("_task", None)
        command.pop("_open_beside", None)
    return Claimed(claim, run, command, None)
