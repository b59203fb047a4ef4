"""Small helpers over Django's connection for the engine's exact SQL.

The engine writes raw SQL on the hot path (claims, fences, conditional updates); this
module keeps the JSON parameters, the one-statement helpers and the error mapping in one
place. How statements travel (server-binding cursor, pipelines, deferred writes, batches)
is ``workflows.engine.pipeline``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import DatabaseError, DataError, InterfaceError, OperationalError, connection
from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads

from workflows import jsonvalues
from workflows.engine import pipeline
from workflows.engine.pipeline import Params
from workflows.exceptions import InvalidPayload, LockTimeout, PersistenceError, Violation

LOCK_NOT_AVAILABLE = "55P03"
DEADLOCK = "40P01"
SERIALIZATION = "40001"
QUERY_CANCELED = "57014"


def dumps(value: Any) -> str:
    """Compact JSON for a jsonb parameter: a Decimal is written as the exact number it holds
    (jsonb keeps ``1000.10`` as ``1000.10``), see ``workflows.jsonvalues``."""
    return jsonvalues.dumps(value)


loads = jsonvalues.loads  # decimals come back as Decimal, integers as int

# Django has psycopg hand jsonb over as text (decoded above), but not json: a ``row_to_json``
# or ``json_agg`` column is decoded by psycopg itself, with ``json.loads`` (decimals as floats)
# unless told otherwise. Process-wide, as psycopg's JSON adapters are.
set_json_loads(jsonvalues.loads)
set_json_dumps(jsonvalues.dumps)


def jsonb(value: Any) -> Jsonb | None:
    if value is None:
        return None
    return Jsonb(value, dumps=dumps)


@contextmanager
def cursor() -> Iterator[Any]:
    with connection.cursor() as cur:
        yield cur


def fetchone(sql: str, params: Params = (), *, prepared: bool = False) -> tuple[Any, ...] | None:
    with pipeline.statement_cursor(prepared) as cur:
        pipeline.run(cur, sql, params)
        return pipeline.first_row(cur, sql)


def fetchall(sql: str, params: Params = (), *, prepared: bool = False) -> list[tuple[Any, ...]]:
    with pipeline.statement_cursor(prepared) as cur:
        pipeline.run(cur, sql, params)
        rows = cur.fetchall()
        if not rows:
            return []
        json_columns = pipeline.shape(cur, sql)[1]
        return [pipeline.decode_row(r, json_columns) for r in rows]


def fetchdicts(sql: str, params: Params = (), *, prepared: bool = False) -> list[dict[str, Any]]:
    with pipeline.statement_cursor(prepared) as cur:
        pipeline.run(cur, sql, params)
        rows = cur.fetchall()
        if not rows:
            return []
        cols, json_columns = pipeline.shape(cur, sql)
        return [dict(zip(cols, pipeline.decode_row(r, json_columns), strict=True)) for r in rows]


def fetchdict(sql: str, params: Params = (), *, prepared: bool = False) -> dict[str, Any] | None:
    rows = fetchdicts(sql, params, prepared=prepared)
    return rows[0] if rows else None


def execute(sql: str, params: Params = (), *, prepared: bool = False) -> int:
    with pipeline.statement_cursor(prepared) as cur:
        pipeline.run(cur, sql, params)
        return int(cur.rowcount)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE behind a database error. A statement that fails in a pipeline can surface
    as psycopg's "pipeline aborted" (raised for a later result while the failure was being
    raised): its sqlstate is that of the failure it replaced."""
    cause: BaseException | None = exc
    for _ in range(16):
        if cause is None:
            break
        if isinstance(cause, psycopg.Error) and cause.sqlstate:
            return str(cause.sqlstate)
        if cause.__cause__ is None and isinstance(cause, psycopg.errors.PipelineAborted):
            cause = cause.__context__
        else:
            cause = cause.__cause__
    return None


# SQLSTATEs of failures that a retry of the whole transaction can get past: another
# transaction held a lock too long or lost a deadlock or a serialization race, or the server
# went away (class 08 connection exceptions; 57P01-57P03 shutdown, crash, not yet accepting;
# 53300 too many connections). Anything else (a constraint, a type, a missing column, a
# statement timeout, which is the segment deadline) fails the same way again.
TRANSIENT_STATES = frozenset({LOCK_NOT_AVAILABLE, DEADLOCK, SERIALIZATION, "57P01", "57P02", "57P03", "53300"})


def is_transient(exc: BaseException) -> bool:
    """Connection loss, lock timeouts, deadlocks and serialization failures (the reference's
    ``TransientDataAccessException``); a workflow error answers its own ``retryable``."""
    if isinstance(exc, LockTimeout | PersistenceError):
        return bool(exc.retryable)
    state = sqlstate(exc)
    if state:
        return state in TRANSIENT_STATES or state.startswith("08")
    # no SQLSTATE: the driver lost the connection (psycopg's OperationalError without a server
    # answer) or finds it closed (InterfaceError)
    return isinstance(exc, OperationalError | InterfaceError)


def is_bad_value(exc: BaseException) -> bool:
    """A data exception (SQLSTATE class 22), or psycopg refusing a NUL character in text
    before sending it (a DataError without a SQLSTATE)."""
    state = sqlstate(exc)
    return bool(state and state.startswith("22")) or (isinstance(exc, DataError | psycopg.DataError) and state is None)


def map_database_error(exc: DatabaseError, operation: str) -> Exception:
    """A value-free workflow error for a database failure: framework text naming the operation
    and the SQLSTATE, never the driver's text or an exception class. Retryable only when the
    failure is transient (``is_transient``); any other is a technical failure (500)."""
    state = sqlstate(exc)
    if state in (LOCK_NOT_AVAILABLE, DEADLOCK):
        return LockTimeout(f"{operation}: the run is busy (lock timeout); retry the transaction")
    if is_bad_value(exc):
        # a value the database cannot store (a NUL character in text, a string too long for
        # its column): the same request fails the same way again, so it is the caller's
        # error (400), never a retryable 503 that clients would retry forever
        message = "a value of the request cannot be stored (a NUL character or an over-long text)"
        return InvalidPayload(
            f"{operation}: {message}", violations=[Violation(pointer="", type="encoding", message=message)]
        )
    if is_transient(exc):
        return PersistenceError(f"{operation}: database unavailable (sqlstate {state or 'unknown'}); retry")
    return PersistenceError.technical(f"{operation}: database failure (sqlstate {state or 'unknown'})")


def fused(statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[str, list[Any]]:
    """Independent writes as one statement (data-modifying CTEs). They share one snapshot: no
    statement may need to see another's effect, and none may have a WITH of its own."""
    parts: list[str] = []
    params: list[Any] = []
    for i, (sql, p) in enumerate(statements):
        parts.append(f"s{i} AS ({sql})")
        params.extend(p)
    return "WITH " + ", ".join(parts) + " SELECT 1", params


CLAIM_FENCE_FAILED = "WF001"  # raised by workflow_claim_fence() (migration 0009)


def execute_fenced_and_commit(statements: Sequence[tuple[str, Sequence[Any]]]) -> bool:
    """A segment's last round trip: the statements as one (data-modifying CTEs), the first of
    which must update exactly one row, then COMMIT in the same pipeline. Answers False — and
    nothing is committed — when the first updated no row (``workflow_claim_fence`` raises, the
    transaction aborts, and the COMMIT rolls it back).

    The caller's ``transaction.atomic()`` then finds the transaction already ended: Django's
    commit at its exit is a no-op for psycopg (the connection is idle), and it runs the
    on-commit callbacks as usual. Nothing may run on the connection between this and that exit.
    """
    parts: list[str] = []
    params: list[Any] = []
    for i, (sql, p) in enumerate(statements):
        parts.append(f"s{i} AS ({sql}{' RETURNING 1' if i == 0 else ''})")
        params.extend(p)
    sql = "WITH " + ", ".join(parts) + " SELECT workflow_claim_fence((SELECT count(*) FROM s0))"
    try:
        with pipeline.statement_cursor(True) as cur:
            pipeline.last_and_commit(cur, sql, params)
    except DatabaseError as exc:
        if sqlstate(exc) == CLAIM_FENCE_FAILED:
            return False
        raise
    return True
