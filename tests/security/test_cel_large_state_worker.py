"""Issue #40 through a real Celery worker: a decision with 250 routes over a ~260 KB state never
outlives its lease, and a normal run started with it completes.

The story: converting the run's state into CEL values happened before each evaluation's clock
started and outside the segment's allowance. A 260 KB state cost ~170 ms per evaluation; a
decision with 250 routes stalled the engine for over 130 s, outlived its lease and was claimed
again. Now the state is converted once per segment, and the conversion counts against the
evaluation's wall-clock backstop and the segment's allowance.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.waiting import eventually
from workflows import conf, definitions, operations
from workflows.models import Command, HistoryEntry, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROUTES = 250
SECRET = "LEAK-SENTINEL-40"
# ~255 KB of small objects: ~45 ms to convert on the development machine, so converting it for
# each of 250 routes took 11 s of CPU, past the suite's 6 s lease
MANY_SMALL = {"rows": [{"i": n, "t": "tttttttttt"} for n in range(8000)]}
# ~250 KB whose every route walks 2,000 objects: each route costs tens of milliseconds, 250 of
# them far more than the segment's allowance
COSTLY = {"rows": [{"id": n, "tag": SECRET} for n in range(2000)], "pad": "p" * 170_000}


def _document(definition_id: str, when: str) -> str:
    routes = "\n".join(f'      - {{when: "{when.format(n=n)}", to: wait-go}}' for n in range(1, ROUTES + 1))
    return f"""
definitionId: {definition_id}
definitionVersion: 1
contract: {{name: {definition_id}.v1, signals: {{go: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialState: "payload"
initialStep: route
steps:
  - id: route
    type: decision
    routes:
{routes}
    default: wait-go
  - id: wait-go
    type: wait-signal
    signal: go
    next: done
  - id: done
    type: complete
"""


def _deploy(definition_id: str, text: str) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=definition_id, version=ref.version, target_scope="default")


def _start_command(run_id: Any) -> Command:
    return Command.objects.get(run_id=run_id, kind="START")


def test_a_250_route_decision_over_a_large_state_never_outlives_its_lease(celery_worker_process: Any) -> None:
    lease = conf.get().EXECUTOR.LEASE_SECONDS
    _deploy("big-cheap", _document("big-cheap", "size(state.rows) == 0 - {n}"))
    _deploy("big-costly", _document("big-costly", "state.rows.exists(r, r.id == 0 - {n})"))
    _deploy("big-normal", _document("big-normal", "state.total == 0 - {n}"))

    cheap = operations.start(definition_id="big-cheap", payload=MANY_SMALL).run_id
    costly = operations.start(definition_id="big-costly", payload=COSTLY).run_id
    normal = operations.start(definition_id="big-normal", payload={"total": 42}).run_id
    started = time.monotonic()
    for run_id, what in ((cheap, "cheap"), (costly, "costly"), (normal, "normal")):
        eventually(
            lambda run_id=run_id: _start_command(run_id).status in ("COMPLETE", "FAILED"),
            timeout=60,
            what=f"the {what} run's start to settle",
            details=celery_worker_process.logs,
        )
    assert time.monotonic() - started < 3 * lease  # a stalled segment alone took 20x that

    # the cheap routes over the many small objects: decided on the first attempt, well within
    # the lease (250 conversions took twice the lease in CPU alone)
    run = Run.objects.get(pk=cheap)
    start = _start_command(cheap)
    assert run.status == "WAITING" and run.current_step == "wait-go", (run.status, run.failure_message)
    assert start.status == "COMPLETE" and start.attempts == 1
    assert (start.settled_at - start.recorded_at).total_seconds() < lease

    # the costly routes: the step fails, value-free, on the first attempt (no lease ran out)
    run = Run.objects.get(pk=costly)
    start = _start_command(costly)
    assert run.status == "FAILED"
    assert run.failure_code == "DETERMINISTIC_FAILURE"
    # the failure names the field and says why, value-free (issue #39's messages)
    assert run.failure_message.startswith(
        "DETERMINISTIC_FAILURE: routes.0.when of step route failed: evaluation budget exceeded"
    ), run.failure_message
    assert start.status == "FAILED" and start.attempts == 1
    assert (run.updated_at - run.created_at).total_seconds() < lease
    history = list(HistoryEntry.objects.filter(run_id=costly).values_list("outcome", "payload"))
    assert SECRET not in repr(history) and SECRET not in start.last_error

    # and the normal run went on meanwhile
    operations.signal(run_id=normal, name="go")
    eventually(
        lambda: Run.objects.get(pk=normal).status == "COMPLETED",
        timeout=60,
        what="the normal run to complete",
        details=celery_worker_process.logs,
    )
