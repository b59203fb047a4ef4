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
