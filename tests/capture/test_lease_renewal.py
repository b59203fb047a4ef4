"""Capture lease renewal (issue #26: implemented, untested): a dispatch that runs longer than
its lease keeps its claim, because a background thread renews the lease every third of its
length, so the sweep does not take the capture away and the dispatch commits its starts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, connections

from capture import dispatch, effects
from capture.models import Capture
from demo.models import PurchaseOrder
from tests.support.waiting import eventually
from workflows import conf
from workflows.models import Run


def lease_state(capture_id: int) -> tuple[Any, Any, str]:
    """(lease_until, the database clock, status) as committed (read on the caller's connection)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lease_until, clock_timestamp(), status FROM capture_captures WHERE id = %s", [capture_id]
        )
        row = cursor.fetchone()
    return row[0], row[1], row[2]


def sweep_from_another_connection() -> list[tuple[int, str]]:
    found: dict[str, Any] = {}

    def body() -> None:
        try:
            found["rows"] = dispatch.recover_expired()
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(10)
    return list(found["rows"])


@pytest.fixture
def short_lease() -> Iterator[None]:
    """A 3-second capture lease in this process (renewed every second)."""
    from django.conf import settings
    from django.test import override_settings

    current = {name: dict(values) for name, values in settings.WORKFLOWS.items()}
    current.setdefault("CAPTURE", {})["LEASE_SECONDS"] = 3
    with override_settings(WORKFLOWS=current):
        conf.reload()
        yield
    conf.reload()


@pytest.fixture
def slow_effect(short_lease: None) -> Iterator[dict[str, Any]]:
    """An effect that outlasts the capture's lease and runs the sweep meanwhile."""
    seen: dict[str, Any] = {}

    @effects.register(
        "demo.PurchaseOrder",
        on=("created",),
        name="tests.slow_effect",
        when=lambda event: event.record["number"].startswith("SLOW"),
        fields=("number",),
    )
    def outlast_the_lease(event: effects.CapturedEvent) -> None:
        capture_id = Capture.objects.get(object_pk=event.object_pk).pk
        first_lease, _, _ = lease_state(capture_id)
        # wait (on the database clock) until the lease seen at the start has run out
        eventually(
            lambda: lease_state(capture_id)[1] > first_lease,
            timeout=3 * conf.get().CAPTURE.LEASE_SECONDS,
            interval=0.2,
            what="the first lease to run out",
        )
        seen["swept"] = sweep_from_another_connection()
        seen["lease"], seen["clock"], seen["status"] = lease_state(capture_id)
        seen["first_lease"] = first_lease

    yield seen
    effects.unregister("tests.slow_effect")
    effects.close()


@pytest.mark.django_db(transaction=True)
def test_a_dispatch_longer_than_its_lease_keeps_its_claim(deploy: Any, no_messages: Any, slow_effect: Any) -> None:
    deploy()
    PurchaseOrder.objects.create(number="SLOW-1", requester="requester", total=Decimal("1500.00"))
    capture = Capture.objects.get()
    assert dispatch.dispatch(capture.pk) == "DISPATCHED"
    assert slow_effect["swept"] == []  # the sweep found no expired claim to take back
    assert slow_effect["status"] == "DISPATCHING"
    assert slow_effect["lease"] > slow_effect["clock"] > slow_effect["first_lease"]  # renewed
    capture.refresh_from_db()
    assert capture.status == "DISPATCHED" and capture.attempts == 1 and capture.lease_until is None
    assert Run.objects.count() == 1
