"""Dispatch effects: Python callables that run when a capture is dispatched, and their markers.

An app registers an effect for a model's events; dispatch calls it inside the dispatch
transaction, after the starts and teardowns it recorded and before its DISPATCHED status
commits::

    from capture import effects

    @effects.register("shop.Order", on=("created",), when=lambda event: event.record["total"] > 1000)
    def notify_erp(event):
        erp.announce(order=event.object_pk)

What the effect does outside the database (a message, a call to another system) cannot be
rolled back with the transaction. So, exactly like the engine's email, agent and script
nodes (``workflows/engine/effects.py``), dispatch first commits an **effect marker** on a
second database connection while its own transaction stays open, fenced by the claim token
(an obsolete dispatch never starts the effect). A dispatch that then fails, or whose worker
dies, is OUTCOME_UNKNOWN: the effect may have happened, so it is never replayed by itself;
an administrator checks the other system and reconciles (replay or resolve).

The second connection is one more database connection per worker process: allow for it in
the connection pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connection

from capture.triggers import EVENTS, invalidate, normalise_label


@dataclass(frozen=True)
class CapturedEvent:
    """What an effect (and a trigger's expressions) know about the change."""

    capture_id: int
    model: str  # app_label.ModelName as captured
    object_pk: str
    event: str  # created / updated / deleted
    record: Any  # the snapshot: the fields the triggers and effects read
    previous: Any  # updates: the same fields before the change
    changed: list[str]  # updates: names of the fields that changed
    actor: Any  # the captured user when still active, else None


@dataclass(frozen=True)
class DispatchEffect:
    name: str
    model: str  # label, lower case
    on: tuple[str, ...]
    func: Callable[[CapturedEvent], Any]
    when: Callable[[CapturedEvent], bool] | None
    fields: frozenset[str] | None  # the record fields it reads (None: every field)


_effects: dict[str, DispatchEffect] = {}
_lock = threading.Lock()


def register(
    model: str,
    *,
    on: Iterable[str],
    name: str | None = None,
    when: Callable[[CapturedEvent], bool] | None = None,
    fields: Iterable[str] | None = None,
) -> Callable[[Callable[[CapturedEvent], Any]], Callable[[CapturedEvent], Any]]:
    """Decorator: run ``func(event)`` when a capture of ``model`` for one of ``on`` is dispatched.

    ``when`` (optional) decides without a marker whether the effect applies; ``fields`` names
    the record fields the effect reads (default: all). Registering a name again replaces it.
    """
    events = tuple(on)
    unknown = [e for e in events if e not in EVENTS]
    if not events or unknown:
        raise ValueError("on must name created, updated or deleted")

    def decorate(func: Callable[[CapturedEvent], Any]) -> Callable[[CapturedEvent], Any]:
        effect_name = name or f"{func.__module__}.{func.__qualname__}"
        effect = DispatchEffect(
            name=effect_name[:255],
            model=normalise_label(model),
            on=events,
            func=func,
            when=when,
            fields=frozenset(fields) if fields is not None else None,
        )
        with _lock:
            _effects[effect.name] = effect
        invalidate()
        return func

    return decorate


def unregister(name: str) -> None:
    with _lock:
        _effects.pop(name, None)
    invalidate()


def registered() -> list[DispatchEffect]:
    with _lock:
        return sorted(_effects.values(), key=lambda e: e.name)


def for_event(model_label: str, event: str) -> list[DispatchEffect]:
    label = normalise_label(model_label)
    return [e for e in registered() if e.model == label and event in e.on]


# --- markers ---------------------------------------------------------------------------------

_local = threading.local()


class ClaimLost(Exception):
    """The claim token no longer holds the capture: this dispatch is obsolete."""


def _second_connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is not None and not conn.closed:
        return conn
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(key, None)
    conn = psycopg.connect(**params, autocommit=True)
    _local.conn = conn
    return conn


def mark_started(*, capture_id: int, token: Any, effect: str) -> None:
    """Commit the marker now, independently of the open dispatch transaction.

    Fenced: the marker is written only while the claim token still holds the capture; the
    dispatch transaction has not locked the capture row (it does that only at its final
    fenced update), so the marker's foreign-key check never waits on it.
    """
    conn = _second_connection()
    try:
        row = conn.execute(
            "INSERT INTO capture_effect_markers (capture_id, token, effect, started_at) "
            "SELECT id, %s, %s, now() FROM capture_captures WHERE id = %s AND claim_token = %s "
            "AND status = 'DISPATCHING' RETURNING id",
            [token, effect[:255], capture_id, token],
        ).fetchone()
    except psycopg.OperationalError:
        _local.conn = None
        raise
    if row is None:
        raise ClaimLost(f"capture {capture_id}: the claim was lost before an effect started")


def close() -> None:
    """Close this thread's second connection (tests, worker shutdown)."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is not None and not conn.closed:
        conn.close()
    _local.conn = None
