"""After-commit wake-ups. The engine does not know Celery: the app registers a notifier.

A wake-up only asks for a pass; it never claims. Losing one loses nothing: the beat sweep
finds every due command in the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from workflows.engine import faults

log = logging.getLogger("workflows.engine")

Notifier = Callable[[list[tuple[str, datetime | None]]], None]
_notifier: Notifier | None = None
_intent_notifier: Callable[[list[int]], None] | None = None


def set_notifier(notifier: Notifier | None, intents: Callable[[list[int]], None] | None = None) -> None:
    global _notifier, _intent_notifier
    _notifier = notifier
    _intent_notifier = intents


def _pending() -> dict[str, Any]:
    """The wake-ups of the current transaction: one after-commit callback however many
    commands it records. The state is live while its callback is still registered (a
    rollback drops Django's on-commit list, and with it our callback)."""
    state: dict[str, Any] | None = getattr(connection, "_workflow_wakeups", None)
    if state is not None and any(entry[1] is state["callback"] for entry in connection.run_on_commit):
        return state
    state = {"runs": {}, "intents": [], "claimed": []}
    state["callback"] = lambda: _fire(state)
    connection._workflow_wakeups = state  # type: ignore[attr-defined]
    transaction.on_commit(state["callback"])
    return state


def _fire(state: dict[str, Any]) -> None:
    runs = list(state["runs"].items())
    intents = list(state["intents"])
    collector = getattr(_inline, "claimed", None)
    if collector is not None:
        collector.extend(state.get("claimed", ()))
    state["runs"].clear()
    state["intents"].clear()
    state.get("claimed", []).clear()
    try:
        faults.point("before_publish")  # committed, the wake-ups not yet sent
        if runs and _notifier is not None:
            _notifier([(run, at) for run, at in runs])
        if intents and _intent_notifier is not None:
            _intent_notifier(intents)
    except Exception:  # a lost wake-up loses nothing: the sweep is the backstop
        log.warning("wake-up publish failed; the sweep will pick the work up", exc_info=True)


def wake(run_id: Any, available_at: datetime | None = None) -> None:
    """Ask for an executor pass for this run after the current transaction commits."""
    if not connection.in_atomic_block:
        _fire({"runs": {str(run_id): available_at}, "intents": []})
        return
    state = _pending()
    key = str(run_id)
    prev = state["runs"].get(key, "missing")
    if prev == "missing" or (prev is not None and (available_at is None or available_at < prev)):
        state["runs"][key] = available_at


def deliver(intent_id: int) -> None:
    """Ask for delivery of an outbox intent after the current transaction commits."""
    if not connection.in_atomic_block:
        _fire({"runs": {}, "intents": [intent_id]})
        return
    _pending()["intents"].append(intent_id)


# Inline delivery. A process that runs segments and can deliver their intents itself (a
# worker's wake-up task) opens ``inline_delivery()``: intents its segments record are then
# claimed in the segment's own transaction (DELIVERING, a token and a lease, one attempt) and
# handed to it after commit, instead of one message and one claim transaction per intent. A
# process that dies before delivering leaves them to lease recovery (the sweep), as any claim.
_inline = threading.local()


@contextmanager
def inline_delivery() -> Iterator[list[dict[str, Any]]]:
    """Collect the intents claimed for this process; the caller delivers them."""
    claimed: list[dict[str, Any]] = []
    previous = getattr(_inline, "claimed", None)
    _inline.claimed = claimed
    try:
        yield claimed
    finally:
        _inline.claimed = previous


def delivers_inline() -> bool:
    return getattr(_inline, "claimed", None) is not None


def deliver_claimed(intent: dict[str, Any]) -> None:
    """Hand an intent claimed in the current transaction to this process after commit."""
    if not connection.in_atomic_block:
        _inline.claimed.append(intent)
        return
    _pending()["claimed"].append(intent)
