"""Effect markers for email, agent and script nodes.

Before the effect runs, a marker row is committed on a **second connection** while the
segment's transaction stays open. If the segment is then interrupted (crash, deadline,
failure) the marker survives and the command becomes OUTCOME_UNKNOWN: the effect may have
happened, so nothing replays it until an administrator reconciles it.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

import psycopg
from django.db import connection

from workflows.engine import sql

_local = threading.local()
_opened: list[psycopg.Connection[Any]] = []


@atexit.register
def _close_all() -> None:
    for conn in _opened:
        if not conn.closed:
            conn.close()


def _second_connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is not None and not conn.closed:
        return conn
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    conn = psycopg.connect(**params, autocommit=True)
    _local.conn = conn
    _opened.append(conn)
    return conn


def mark_started(*, command_id: int, run_id: Any, token: Any, step: str) -> None:
    """Commit the marker now, independently of the open segment transaction."""
    conn = _second_connection()
    try:
        conn.execute(
            sql.load("effects").mark_started,
            [command_id, run_id, token, step],
        )
    except psycopg.OperationalError:
        _local.conn = None
        raise


def has_marker(command_id: int, token: Any) -> bool:
    from workflows.engine import db

    return db.fetchone(sql.load("effects").has_marker, [command_id, token]) is not None
