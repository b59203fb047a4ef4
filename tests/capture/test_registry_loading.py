"""The trigger registry is read when a database connection opens, without deadlocking.

Regression (issue 39, found while fixing it): reading the registry at each new connection made
a refresh that itself opened the thread's connection ask for the registry again while holding
its lock; a live server whose request started on a closed connection hung there for good.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from capture import triggers

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_refresh_that_opens_the_connection_reads_the_registry_once_without_deadlock(deploy: Any) -> None:
    deploy()
    triggers.invalidate()
    found: dict[str, Any] = {}

    def refresh_on_a_fresh_connection() -> None:
        try:
            assert connection.connection is None  # this thread's own, not yet opened
            found["watch"] = triggers.refresh()
        finally:
            connections.close_all()

    worker = threading.Thread(target=refresh_on_a_fresh_connection, daemon=True)
    worker.start()
    worker.join(timeout=30)  # a deadlock fails the test instead of hanging the suite
    assert not worker.is_alive(), "the refresh deadlocked on its own connection"
    assert found["watch"].get(_purchase_order()) is not None


def test_a_new_connection_reads_a_stale_registry(deploy: Any) -> None:
    deploy()
    triggers.invalidate()
    seen: dict[str, Any] = {}

    def connect_only() -> None:
        try:
            connection.ensure_connection()  # no save, no request: only a connection
            seen["watch"] = triggers._cache._watch
            seen["fresh"] = triggers._cache._loaded_at is not None
        finally:
            connections.close_all()

    worker = threading.Thread(target=connect_only, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert seen["fresh"] and seen["watch"].get(_purchase_order()) is not None


def _purchase_order() -> Any:
    from demo.models import PurchaseOrder

    return PurchaseOrder
