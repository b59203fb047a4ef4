"""Every settled command is reported once to the observers (metrics, logs): also the ones a
segment or a teardown settles besides the command it runs — a disarmed timer's TIMER command,
a parked signal applied, the commands a cancel closes — and none of a rolled-back transaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from tests.engine import documents
from workflows import operations
from workflows.engine import observers
from workflows.models import Command

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")


@pytest.fixture
def events() -> Iterator[list[observers.CommandSettled]]:
    seen: list[observers.CommandSettled] = []

    def observe(event: Any) -> None:
        if isinstance(event, observers.CommandSettled):
            seen.append(event)

    observers.register(observe)
    yield seen
    observers.unregister(observe)


def reported(events: list[observers.CommandSettled]) -> Counter[tuple[int, str, str]]:
    """Final settlements (a PARKED signal is reported when parked, but is not settled yet)."""
    return Counter((e.command_id, e.kind, e.outcome) for e in events if e.outcome != "PARKED")


def in_database(run_id: Any) -> Counter[tuple[int, str, str]]:
    rows = Command.objects.filter(run_id=run_id, settled_at__isnull=False).values_list("id", "kind", "status")
    return Counter(rows)


def test_a_signal_that_leaves_a_wait_reports_its_timers_command_too(
    deploy: Any, drain: Any, events: list[observers.CommandSettled]
) -> None:
    deploy(ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "E-1"}).run_id
    drain()
    operations.signal(run_id=run_id, name="paid", payload={"amount": 2})
    drain()
    kinds = Counter((kind, outcome) for _, kind, outcome in reported(events))
    assert kinds == Counter({("START", "COMPLETE"): 1, ("SIGNAL", "COMPLETE"): 1, ("TIMER", "CANCELLED"): 1})
    assert reported(events) == in_database(run_id)


def test_a_parked_signal_applied_at_its_wait_is_reported(
    deploy: Any, drain: Any, events: list[observers.CommandSettled]
) -> None:
    from tests.engine.test_e2e_worker_commands import TWO_WAITS

    deploy(TWO_WAITS)
    run_id = operations.start(definition_id="two-waits", payload={}).run_id
    drain()
    early = operations.signal(run_id=run_id, name="second").command_id  # parked: the run waits at `first`
    drain()
    assert Command.objects.get(pk=early).status == "PARKED"
    assert (early, "SIGNAL", "COMPLETE") not in reported(events)
    operations.signal(run_id=run_id, name="first")
    drain()
    assert Command.objects.get(pk=early).status == "COMPLETE"
    assert reported(events)[(early, "SIGNAL", "COMPLETE")] == 1
    assert reported(events) == in_database(run_id)


def test_cancel_reports_every_command_it_closes(
    deploy: Any, drain: Any, events: list[observers.CommandSettled]
) -> None:
    deploy(ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "E-3"}).run_id
    drain()
    operations.signal(run_id=run_id, name="cancelled")  # pending: the cancel closes it
    operations.cancel(run_id=run_id, reason="asked")
    kinds = Counter((kind, outcome) for _, kind, outcome in reported(events))
    assert kinds == Counter({("START", "COMPLETE"): 1, ("SIGNAL", "CANCELLED"): 1, ("TIMER", "CANCELLED"): 1})
    assert reported(events) == in_database(run_id)


def test_a_cancel_rolled_back_reports_nothing(deploy: Any, drain: Any, events: list[observers.CommandSettled]) -> None:
    deploy(ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "E-4"}).run_id
    drain()
    before = list(events)
    with pytest.raises(RuntimeError), transaction.atomic():
        operations.cancel(run_id=run_id, reason="asked")
        raise RuntimeError("the caller's transaction fails after the cancel")
    assert events == before
    assert reported(events) == in_database(run_id)
    assert Command.objects.get(run_id=run_id, kind="TIMER").status == "PENDING"
