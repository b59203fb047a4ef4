"""How the engine's statements reach PostgreSQL: psycopg's server-binding cursor, pipelines.

The hot path is measured in round trips and client CPU, so the engine goes below Django's
cursor here: statements bound and prepared on the server, several statements (and the
transaction's BEGIN and COMMIT) queued in one pipeline and sent in one write, writes deferred
until the transaction's next statement, result shapes read once per statement text. Parts of
it lean on psycopg's internals (``_QUEUES_COMMANDS`` says whether they are there); keeping them
apart from ``db``'s plain helpers keeps that dependency in one module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.generators
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from psycopg.pq import ExecStatus, TransactionStatus

from workflows import jsonvalues

Params = Sequence[Any] | Mapping[str, Any]  # positional (%s) or named (%(name)s) parameters
IDLE = TransactionStatus.IDLE
TUPLES_OK = ExecStatus.TUPLES_OK


JSON_OIDS = (114, 3802)  # json, jsonb: Django's psycopg setup hands them over as text


def _decoder(description: Any) -> tuple[int, ...]:
    """The positions of the JSON columns."""
    return tuple(i for i, c in enumerate(description) if getattr(c, "type_code", None) in JSON_OIDS)


# The result shape (column names, which are JSON) of each statement text, read from the
# first result: psycopg builds ``cursor.description`` afresh on every access, which costs more
# than the rest of a short statement's client work. A text always has the same shape.
_SHAPES: dict[str, tuple[list[str], tuple[int, ...]]] = {}
_SHAPES_MAX = 1024


def shape(cur: Any, sql: str) -> tuple[list[str], tuple[int, ...]]:
    found = _SHAPES.get(sql)
    if found is None:
        description = cur.description
        found = ([c[0] for c in description], _decoder(description))
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[sql] = found
    return found


def decode_row(row: Sequence[Any], json_columns: tuple[int, ...]) -> tuple[Any, ...]:
    """A result row with its JSON columns (``shape``) decoded."""
    if not json_columns:
        return tuple(row)
    decoded = list(row)
    for i in json_columns:
        value = decoded[i]
        if isinstance(value, str):
            decoded[i] = jsonvalues.loads(value)
    return tuple(decoded)


# Prepared statements for the hot path. Django's connections bind parameters on the client
# and prepare nothing (so that poolers work); the statements the executor and the recordings
# run for every command are long (CTEs, the head rule) and PostgreSQL spends more time planning
# them than running them. Those pass ``prepared=True``: they go through a server-binding cursor
# on the same connection (same transaction, same adapters, Django's error mapping), and
# psycopg prepares each after PREPARE_THRESHOLD uses on that connection. Only single
# statements with plain parameters qualify (no ``IN %s`` tuples, no several statements).
PREPARE_THRESHOLD = 2


def behind_transaction_pooler(wrapper: Any) -> bool:
    """The database is reached through a transaction-pooling proxy (PgBouncer's
    ``pool_mode = transaction``), configured the way Django documents it: with
    ``DISABLE_SERVER_SIDE_CURSORS``. Nothing is prepared then (a prepared statement lives on
    one server connection, and the next transaction may get another one)."""
    return bool(wrapper.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


@contextmanager
def statement_cursor(prepared: bool) -> Iterator[Any]:
    """Django's cursor, or (``prepared``) the connection's server-binding cursor."""
    if not prepared:
        with connection.cursor() as cur:
            yield cur
        return
    wrapper = connections[DEFAULT_DB_ALIAS]
    wrapper.close_if_health_check_failed()
    if wrapper.connection is None:
        wrapper.ensure_connection()
    raw = wrapper.connection
    # one server-binding cursor per connection, reused (its results are always read before
    # the next statement): creating one per statement costs more than a short statement
    held = getattr(wrapper, "_workflow_cursor", None)
    if held is None or held[0] is not raw:
        if raw.prepare_threshold is None and not behind_transaction_pooler(wrapper):
            raw.prepare_threshold = PREPARE_THRESHOLD  # affects server-binding cursors only
        held = (raw, psycopg.Cursor(raw))
        wrapper._workflow_cursor = held  # type: ignore[attr-defined]
    with wrapper.wrap_database_errors:
        yield held[1]


# psycopg (3.3) follows the BEGIN it sends for a transaction's first statement in pipeline
# mode with a Sync and waits for it, and ``Connection.commit()`` in a pipeline syncs before the
# pipeline's own Sync at its exit: each a round trip with nothing in it. ``_begin`` and
# ``_commit`` queue the same commands through psycopg's own command queue without those Syncs,
# so they travel with the statements around them; the pipeline's exit reads every result and
# raises the first error as before. Where those internals are missing (another psycopg), the
# public calls are used: the same effect, a round trip more.
_QUEUES_COMMANDS = (
    all(hasattr(psycopg.Connection, name) for name in ("_exec_command", "_get_tx_start_command", "wait"))
    and all(hasattr(psycopg.Pipeline, n) for n in ("_communicate_gen", "_exit_gen", "_fetch_gen", "_enqueue_sync"))
    and all(hasattr(psycopg.Cursor, name) for name in ("_start_query", "_convert_query", "_maybe_prepare_gen"))
)


def _begin(raw: Any) -> None:
    """Inside ``raw.pipeline()``, before a transaction's first statement: queue BEGIN without
    a Sync. Once libpq holds it, it reports the connection busy, not idle, so psycopg starts no
    transaction of its own for the statement that follows."""
    if not _QUEUES_COMMANDS or raw.autocommit or raw.info.transaction_status != IDLE:
        return
    with raw.lock:
        pipeline = raw._pipeline
        if pipeline.command_queue:  # not the pipeline's first command: keep psycopg's order
            raw.wait(raw._exec_command(raw._get_tx_start_command()))
            raw.wait(pipeline._communicate_gen())
            return
        raw.pgconn.send_query_params(raw._get_tx_start_command(), None)  # into libpq's buffer
        pipeline.result_queue.append(None)


# psycopg sends every statement queued in a pipeline as soon as it is queued, and each in a
# write of its own (its send loop waits for the socket, flushes, and hands libpq one command
# per turn), and after the pipeline's Sync one more message (a Flush): on a VM every write
# wakes the server. ``_queue`` queues a statement without sending it, and ``_Pipeline`` hands
# libpq every queued command at once and leaves out the Flush, so a pipeline's statements and
# its Sync go out in one write when it ends.
if _QUEUES_COMMANDS:

    class _Pipeline(psycopg.Pipeline):
        def _communicate_gen(self) -> Any:
            queued = self.command_queue
            while queued:  # into libpq's output buffer (it writes out only a full one)
                queued.popleft()()
            yield from super()._communicate_gen()

        def _exit_gen(self) -> Any:
            try:
                self._enqueue_sync()
                yield from self._communicate_gen()
            finally:
                # everything written out first: _communicate_gen flushes once after the last
                # command, and a large batch (a bulk migration's history) over a Unix socket
                # leaves part of it in libpq's buffer; the server would wait for the rest
                # (ClientRead) while this waited for results
                yield from psycopg.generators.send(self.pgconn)
                # the Sync makes the server send every result: no Flush needed to read them
                yield from self._fetch_gen(flush=False)


def _queue(cur: Any, sql: str, params: Params) -> None:
    """Inside ``raw.pipeline()``: a statement on a server-binding cursor, queued (psycopg's
    ``Cursor.execute`` without its send); its results reach ``cur`` when the pipeline ends."""
    if not _QUEUES_COMMANDS:
        cur.execute(sql, params)
        return
    raw = cur.connection
    try:
        with raw.lock:
            raw.wait(_queue_gen(cur, sql, params))
    except psycopg.Error as exc:
        raise exc.with_traceback(None)


def _queue_gen(cur: Any, sql: str, params: Params) -> Any:
    yield from cur._start_query(sql)
    query = cur._convert_query(sql, params)
    yield from cur._maybe_prepare_gen(query, prepare=None, binary=None)
    cur._last_query = sql
    yield from cur._conn._prepared.maintain_gen(cur._conn)


@contextmanager
def _pipeline(raw: Any) -> Iterator[None]:
    if _QUEUES_COMMANDS and raw._pipeline is None:
        raw._pipeline = _Pipeline(raw)
    with raw.pipeline():
        yield


# A claim, then the segment that runs it, in one round trip (``committed_then_batch``): the
# first statement in a transaction of its own, committed, and the caller's transaction opened
# with the statements that follow. Needs psycopg's command queue (``_QUEUES_COMMANDS``).
COMMITS_IN_PIPELINE = _QUEUES_COMMANDS


def committed_then_batch(
    first: tuple[str, Params], statements: Sequence[tuple[str, Params]]
) -> tuple[dict[str, Any] | None, list[dict[str, Any] | None], DatabaseError | None]:
    """Inside a ``transaction.atomic()`` block that has sent nothing yet: ``BEGIN; first;
    COMMIT; BEGIN; statements...`` and one Sync, in one write and one round trip. ``first``
    is committed before the statements run; they open the block's transaction.

    Answers (first's row, each statement's first row, None); when a statement after ``first``
    failed: (first's row, [], the error) — ``first`` stands, the block's transaction is aborted
    and must roll back. Raises when ``first`` itself failed (nothing was committed)."""
    sql0, params0 = first
    held: list[Any] = []
    cursors: list[psycopg.Cursor[Any]] = []
    try:
        with statement_cursor(True) as cur0:
            held.append(cur0)
            raw = cur0.connection
            if not COMMITS_IN_PIPELINE or raw.autocommit or raw.info.transaction_status != IDLE:
                raise RuntimeError("committed_then_batch: needs an atomic block that has sent nothing yet")
            cursors = [psycopg.Cursor(raw) for _ in statements]
            with _pipeline(raw):
                _begin(raw)
                _queue(cur0, sql0, params0)
                with raw.lock:
                    raw.wait(raw._exec_command(b"COMMIT"))
                    raw.wait(raw._exec_command(raw._get_tx_start_command()))
                for cur, (sql, params) in zip(cursors, statements, strict=True):
                    _queue(cur, sql, params)
            row0 = _first_dict(cur0, sql0)
            return row0, [_first_dict(cur, sql) for cur, (sql, _) in zip(cursors, statements, strict=True)], None
    except DatabaseError as exc:
        result = held[0].pgresult if held else None
        if result is None or result.status != TUPLES_OK:
            raise  # the first statement failed: nothing committed
        return _first_dict(held[0], sql0), [], exc
    finally:
        for cur in cursors:
            cur.close()


def _first_dict(cur: Any, sql: str) -> dict[str, Any] | None:
    result = cur.pgresult
    row = cur.fetchone() if result is not None and result.status == TUPLES_OK else None
    if row is None:
        return None
    cols, json_columns = shape(cur, sql)
    return dict(zip(cols, decode_row(row, json_columns), strict=True))


def _commit(raw: Any) -> None:
    """Inside ``raw.pipeline()``: queue COMMIT; the pipeline's exit sends it with its Sync."""
    if not _QUEUES_COMMANDS:
        raw.commit()
        return
    with raw.lock:
        raw.wait(raw._exec_command(b"COMMIT"))


# Deferred writes. Inside ``deferring()`` (a segment's optimistic attempt), a write whose
# answer nobody needs before the commit (an outbox intent) is not sent on its own: it waits
# for the next statement the transaction sends and travels before it in the same pipeline,
# in the order the writes were asked for. ``then`` gets its first row (None when it returned
# none) once that round trip succeeded. Any query through Django's cursors sends the pending
# writes first, so nothing ever runs ahead of them. Leaving the block drops what was not sent
# (the transaction did not commit: a segment sends every pending write with its COMMIT).
_deferred = threading.local()


@contextmanager
def deferring() -> Iterator[None]:
    previous = getattr(_deferred, "pending", None)
    _deferred.pending = []
    try:
        with connection.execute_wrapper(_send_deferred_first):
            yield
    finally:
        _deferred.pending = previous


Answered = Callable[[tuple[Any, ...] | None], None]  # a deferred write's row, when it is known


def deferring_now() -> bool:
    """Inside ``deferring()``: a write given to ``defer`` waits for the next statement."""
    return getattr(_deferred, "pending", None) is not None


def ignore_answer(row: tuple[Any, ...] | None) -> None:
    """The ``then`` of a deferred write whose row nobody needs."""


def defer(sql: str, params: Params, then: Answered) -> None:
    """Send a write with the transaction's next statement (at once outside ``deferring``)."""
    pending = getattr(_deferred, "pending", None)
    if pending is None:
        with statement_cursor(True) as cur:
            run(cur, sql, params)
            then(first_row(cur, sql))
        return
    pending.append((sql, params, then))


def _take_deferred() -> list[tuple[str, Params, Answered]]:
    pending = getattr(_deferred, "pending", None)
    if not pending:
        return []
    taken = list(pending)
    pending.clear()
    return taken


def _send_deferred_first(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
    if getattr(_deferred, "pending", None):
        fetch_batch([])  # the pending writes, in a round trip of their own
    return execute(sql, params, many, context)


def _queue_deferred(raw: Any, taken: list[tuple[str, Params, Answered]]) -> list[tuple[Any, str, Any]]:
    """Inside the pipeline, after ``_begin``: the taken writes, each on a cursor of its own."""
    sent: list[tuple[Any, str, Any]] = []
    for sql, params, then in taken:
        cur = psycopg.Cursor(raw)
        sent.append((cur, sql, then))
        _queue(cur, sql, params)
    return sent


def _answer_deferred(sent: list[tuple[Any, str, Any]]) -> None:
    """After the pipeline succeeded: hand each deferred write its row."""
    for cur, sql, then in sent:
        result = cur.pgresult
        row = cur.fetchone() if result is not None and result.status == TUPLES_OK else None
        then(decode_row(row, shape(cur, sql)[1]) if row is not None else None)


@contextmanager
def _transaction_pipeline(raw: Any, taken: list[tuple[str, Params, Answered]] | None = None) -> Iterator[None]:
    """``raw.pipeline()`` opened with the transaction's BEGIN (when one is due) and the writes
    still deferred (``taken``, else whatever is pending); the block queues its statements after
    them. Once the round trip succeeded each deferred write gets its row."""
    sent: list[tuple[Any, str, Any]] = []
    try:
        with _pipeline(raw):
            _begin(raw)
            sent = _queue_deferred(raw, _take_deferred() if taken is None else taken)
            yield
        _answer_deferred(sent)
    finally:
        for cur, _, _ in sent:
            cur.close()


def run(cur: Any, sql: str, params: Any) -> None:
    """Execute on a cursor from ``statement_cursor``. The first statement of a transaction goes out in
    pipeline mode on a server-binding cursor with the transaction's BEGIN before it: one
    round trip for both."""
    raw = cur.connection
    if not isinstance(cur, psycopg.Cursor):
        cur.execute(sql, params)  # a Django cursor: pending deferred writes go first (its wrapper)
        return
    taken = _take_deferred()
    if not taken and (raw.autocommit or raw.info.transaction_status != IDLE):
        cur.execute(sql, params)
        return
    with _transaction_pipeline(raw, taken):
        _queue(cur, sql, params)


def first_row(cur: Any, sql: str) -> tuple[Any, ...] | None:
    """The first row of the statement ``sql`` just run on ``cur``, its JSON columns decoded."""
    row = cur.fetchone()
    return decode_row(row, shape(cur, sql)[1]) if row is not None else None


def execute_batch(statements: Sequence[tuple[str, Params]]) -> int:
    """Several statements in one round trip: psycopg's pipeline mode, each statement bound on
    the server (and prepared once it repeats); answers the rowcount of the first statement,
    which is the one whose effect the caller must check. As in one multi-statement query, a
    failing statement skips the rest and raises."""
    if not statements:
        return 0
    with statement_cursor(True) as first:
        raw = first.connection
        rest: list[psycopg.Cursor[Any]] = []
        try:
            with _transaction_pipeline(raw):
                _queue(first, statements[0][0], statements[0][1])
                for sql, params in statements[1:]:
                    cur = psycopg.Cursor(raw)
                    rest.append(cur)
                    _queue(cur, sql, params)
        finally:
            for cur in rest:
                cur.close()
        return int(first.rowcount)


# An operation that opened the transaction itself (``operations``, not a caller's atomic
# block) may send COMMIT with its last statement: one round trip less per recording.
_owner = threading.local()


@contextmanager
def owned_transaction() -> Iterator[None]:
    """Inside ``transaction.atomic()``: note whether that block opened the transaction (it is
    the only one), so the recording's last statement may carry the commit (``may_commit``)."""
    blocks = connection.atomic_blocks
    previous = getattr(_owner, "block", None)
    _owner.block = blocks[-1] if len(blocks) == 1 else None
    try:
        yield
    finally:
        _owner.block = previous


def may_commit() -> bool:
    """The transaction was opened by the current operation, which is at its end: no caller's
    block around it, no savepoint open, nothing marked for rollback."""
    block = getattr(_owner, "block", None)
    return (
        block is not None
        and connection.commit_on_exit  # not a transaction the caller opened with autocommit off
        and connection.atomic_blocks == [block]
        and not connection.savepoint_ids
        and not connection.needs_rollback
    )


def fetchone_and_commit(
    sql: str, params: Sequence[Any], *, before: Sequence[tuple[str, Params]] = ()
) -> tuple[Any, ...] | None:
    """An operation's last statement and COMMIT in one round trip (``may_commit`` must hold);
    ``before``: statements sent ahead of it in the same round trip (their rows are dropped).
    Its ``transaction.atomic()`` then commits nothing more and runs the on-commit callbacks;
    nothing may run on the connection before that block exits."""
    with statement_cursor(True) as cur:
        last_and_commit(cur, sql, params, before)
        return first_row(cur, sql)


def last_and_commit(cur: Any, sql: str, params: Sequence[Any], before: Sequence[tuple[str, Params]] = ()) -> None:
    """A transaction's last statement, after the writes still deferred, and COMMIT: one round trip."""
    raw = cur.connection
    ahead = [psycopg.Cursor(raw) for _ in before]
    try:
        with _transaction_pipeline(raw):
            for other, (sql0, params0) in zip(ahead, before, strict=True):
                _queue(other, sql0, params0)
            _queue(cur, sql, params)
            _commit(raw)
    finally:
        for other in ahead:
            other.close()


def fetch_batch(statements: Sequence[tuple[str, Params]]) -> list[tuple[Any, ...] | None]:
    """Several statements in one round trip (pipeline mode, bound on the server and prepared
    once they repeat); answers each statement's first row, or None when it returned none. They
    run in order; a failing statement skips the rest and raises."""
    return _fetch_batch(statements, as_dicts=False)


def fetchdict_batch(statements: Sequence[tuple[str, Params]]) -> list[dict[str, Any] | None]:
    """:func:`fetch_batch` answering each first row as a dict (column name → value)."""
    return _fetch_batch(statements, as_dicts=True)


def _fetch_batch(statements: Sequence[tuple[str, Params]], *, as_dicts: bool) -> list[Any]:
    taken = _take_deferred()
    if not statements and not taken:
        return []
    with statement_cursor(True) as first:
        raw = first.connection
        cursors = ([first] if statements else []) + [psycopg.Cursor(raw) for _ in statements[1:]]
        try:
            with _transaction_pipeline(raw, taken):
                for cur, (sql, params) in zip(cursors, statements, strict=True):
                    _queue(cur, sql, params)
            rows: list[Any] = []
            for cur, (sql, _) in zip(cursors, statements, strict=True):
                # whether it returned rows, without ``description`` (which builds every column)
                result = cur.pgresult
                row = cur.fetchone() if result is not None and result.status == TUPLES_OK else None
                if row is None:
                    rows.append(None)
                    continue
                cols, json_columns = shape(cur, sql)
                decoded = decode_row(row, json_columns)
                rows.append(dict(zip(cols, decoded, strict=True)) if as_dicts else decoded)
            return rows
        finally:
            for cur in cursors[1:]:
                cur.close()
