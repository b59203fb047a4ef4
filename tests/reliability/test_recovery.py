"""Recovery of claims whose executor died, without depending on a sweep message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from workflows import operations
from workflows.engine import db, executor
from workflows.models import Command

pytestmark = [pytest.mark.services, pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

WAIT = """
definitionId: rel-wait
definitionVersion: 1
contract: {name: relwait.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


def test_a_draining_worker_takes_back_a_dead_executors_expired_claim(
    deploy: Callable[..., Any], drain: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found by the lite crash run): a worker SIGKILLed while holding a claim left
    the command CLAIMED until a ``workflows.sweep`` message ran. Under a backlog of wake-ups
    the sweep waits behind them in the broker queue, and the run stalled far beyond lease +
    sweep interval (121 s with an 8 s lease). Busy workers now take expired claims back
    themselves, so recovery no longer waits for the sweep's message."""
    deploy(WAIT)
    recorded = operations.start(definition_id="rel-wait", payload={})
    head = executor.peek(10, recorded.run_id)[0]
    token = executor.claim(head, lease_seconds=30, max_attempts=5)
    assert token is not None  # ... and the executor holding it is killed here
    db.execute("UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE id = %s", [head.id])

    monkeypatch.setattr(executor, "_last_recovery", 0.0)  # no recovery in this process for a while
    drain()  # a wake-up for any run: no sweep ran

    start = Command.objects.get(pk=recorded.command_id)
    assert (start.status, start.attempts) == ("COMPLETE", 2)
