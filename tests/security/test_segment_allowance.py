"""Issue #25: one segment's expressions share a CPU allowance.

Each evaluation is bounded (50 ms of CPU), but a plan looping through costly decisions ran up
to MAX_STEPS_PER_SEGMENT of them in one segment: 1,000 x 50 ms, past the lease, so the segment
was cut at its deadline and the command claimed again until MAX_ATTEMPTS. With the allowance the
run fails deterministically on its first attempt.
"""

from __future__ import annotations

import re
import time

import pytest

from workflows import definitions, operations
from workflows.definitions import expressions
from workflows.engine import executor
from workflows.models import Command, Run

pytestmark = pytest.mark.django_db(transaction=True)

# ~5-15 ms of CPU per decision (an 8 x 8 comprehension), looping between two of them
COSTLY = "state.xs.map(x, state.xs.map(y, x + y)).size() < 0"
LOOP = f"""
definitionId: costly-loop
definitionVersion: 1
contract: {{name: costly-loop.v1}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialState: "payload"
initialStep: a
steps:
  - id: a
    type: decision
    routes: [{{when: "{COSTLY}", to: done}}]
    default: b
  - id: b
    type: decision
    routes: [{{when: "{COSTLY}", to: done}}]
    default: a
  - id: done
    type: complete
"""


def test_a_loop_of_costly_expressions_fails_on_its_first_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expressions, "MAX_SEGMENT_EVALUATION_CPU_MS", 300)
    ref = definitions.load(scope="default", text=LOOP, format="yaml")
    definitions.publish(scope="default", definition_id="costly-loop", version=ref.version)
    definitions.activate(scope="default", definition_id="costly-loop", version=ref.version, target_scope="default")
    run_id = operations.start(definition_id="costly-loop", payload={"xs": list(range(8))}).run_id
    started = time.monotonic()
    executor.drain(run_id=run_id, budget_seconds=20)
    run = Run.objects.get(pk=run_id)
    start = Command.objects.get(run_id=run_id, kind="START")
    assert run.status == "FAILED" and run.failure_code == "DETERMINISTIC_FAILURE"
    # the step of the loop that found the allowance spent, named with its field, value-free
    assert re.fullmatch(
        r"DETERMINISTIC_FAILURE: routes\.0\.when of step [ab] failed: evaluation budget exceeded \(\w+\)",
        run.failure_message,
    ), run.failure_message
    assert start.status == "FAILED" and start.attempts == 1
    assert time.monotonic() - started < 10
