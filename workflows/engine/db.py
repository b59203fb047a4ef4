"""Small helpers over Django's connection for the engine's exact SQL.

The engine writes raw SQL on the hot path (claims, fences, conditional updates); this
module keeps the cursor handling, JSON parameters and error mapping in one place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import psycopg
from django.db import DatabaseError, OperationalError, connection
from psycopg.types.json import Jsonb

from workflows.exceptions import LockTimeout, PersistenceError

LOCK_NOT_AVAILABLE = "55P03"
DEADLOCK = "40P01"
SERIALIZATION = "40001"
QUERY_CANCELED = "57014"


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError("not JSON serialisable")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_default)


def jsonb(value: Any) -> Jsonb | None:
    if value is None:
        return None
    return Jsonb(value, dumps=dumps)


@contextmanager
def cursor() -> Iterator[Any]:
    with connection.cursor() as cur:
        yield cur


JSON_OIDS = (114, 3802)  # json, jsonb: Django's psycopg setup hands them over as text


def _decoder(description: Any) -> list[bool]:
    return [getattr(c, "type_code", None) in JSON_OIDS for c in description]


def decode_row(row: Sequence[Any], json_columns: list[bool]) -> tuple[Any, ...]:
    return tuple(
        json.loads(v) if is_json and isinstance(v, str) else v for v, is_json in zip(row, json_columns, strict=True)
    )


def fetchone(sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
        return decode_row(row, _decoder(cur.description)) if row is not None else None


def fetchall(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        json_columns = _decoder(cur.description)
        return [decode_row(r, json_columns) for r in cur.fetchall()]


def fetchdicts(sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        cols = [c[0] for c in cur.description]
        json_columns = _decoder(cur.description)
        return [dict(zip(cols, decode_row(r, json_columns), strict=True)) for r in cur.fetchall()]


def fetchdict(sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
    rows = fetchdicts(sql, params)
    return rows[0] if rows else None


def execute(sql: str, params: Sequence[Any] = ()) -> int:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return int(cur.rowcount)


def sqlstate(exc: BaseException) -> str | None:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, psycopg.Error) and cause.sqlstate:
            return str(cause.sqlstate)
        cause = cause.__cause__
    return None


def is_transient(exc: BaseException) -> bool:
    """Connection loss, lock timeouts, deadlocks and serialization failures."""
    if isinstance(exc, LockTimeout | PersistenceError):
        return True
    state = sqlstate(exc)
    if state in (LOCK_NOT_AVAILABLE, DEADLOCK, SERIALIZATION):
        return True
    if state and state.startswith("08"):  # connection exceptions
        return True
    return isinstance(exc, OperationalError) and state != QUERY_CANCELED


def map_database_error(exc: DatabaseError, operation: str) -> Exception:
    """A value-free workflow error for a database failure (never the driver's text)."""
    state = sqlstate(exc)
    if state in (LOCK_NOT_AVAILABLE, DEADLOCK):
        return LockTimeout(f"{operation}: the run is busy (lock timeout); retry the transaction")
    return PersistenceError(f"{operation}: database failure ({type(exc).__name__}, sqlstate {state or 'unknown'})")


def execute_batch(statements: Sequence[tuple[str, Sequence[Any]]]) -> int:
    """Several statements in one round trip (client-side binding); answers the rowcount of
    the first statement, which is the one whose effect the caller must check."""
    if not statements:
        return 0
    sql = ";\n".join(s for s, _ in statements)
    params: list[Any] = []
    for _, p in statements:
        params.extend(p)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return int(cur.rowcount)
