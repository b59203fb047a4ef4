"""Executor observers: a registry of callables, each isolated (a failing one affects nothing)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("workflows.engine")


@dataclass(frozen=True)
class CommandSettled:
    run_id: str
    command_id: int
    kind: str
    outcome: str  # COMPLETE / REJECTED / STALE / PARKED / FAILED / DEAD / CANCELLED / OUTCOME_UNKNOWN
    duration_ms: float = 0.0


@dataclass(frozen=True)
class CommandDeferred:
    run_id: str
    command_id: int
    kind: str
    deferral_count: int


@dataclass(frozen=True)
class TransientRetry:
    run_id: str
    command_id: int
    kind: str
    transient_count: int


@dataclass(frozen=True)
class LeaseExpired:
    run_id: str
    command_id: int
    kind: str


@dataclass(frozen=True)
class QueueSnapshot:
    counts: dict[str, int]
    notification_queue_usage: float = 0.0


@dataclass(frozen=True)
class ActorAbsent:
    kind: str


Observer = Callable[[Any], None]
_observers: list[Observer] = []


def register(observer: Observer) -> Observer:
    if observer not in _observers:
        _observers.append(observer)
    return observer


def unregister(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)


def has_observers() -> bool:
    return bool(_observers)


def emit(event: Any) -> None:
    for observer in list(_observers):
        try:
            observer(event)
        except Exception:
            log.warning("workflow observer %r failed", getattr(observer, "__name__", observer), exc_info=True)


def settled(run_id: Any, command_id: int, kind: str, outcome: str, duration_ms: float = 0.0) -> None:
    """Every settlement: one observer event and one log line (ids, kind, outcome, duration;
    never a payload value)."""
    emit(CommandSettled(str(run_id), command_id, kind, outcome, duration_ms))
    log.info(
        "command settled",
        extra={
            "run_id": str(run_id),
            "command_id": command_id,
            "kind": kind,
            "outcome": outcome,
            "duration_ms": round(duration_ms, 2),
        },
    )


def settled_on_commit(run_id: Any, rows: list[tuple[int, str, str]]) -> None:
    """Settlements of commands other than the one a segment runs (timers disarmed, parked
    signals applied or rejected, commands cancelled or superseded by a teardown or a
    migration): reported once the transaction that settled them commits, never for a rollback."""
    if not rows:
        return
    from django.db import transaction

    def report() -> None:
        for command_id, kind, outcome in rows:
            settled(run_id, command_id, kind, outcome)

    transaction.on_commit(report)
