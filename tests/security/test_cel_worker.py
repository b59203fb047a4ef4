"""Issue #25 through a real Celery worker: adversarial CEL fails its step fast, and a normal
run started at the same time completes.

Before the fix, ``duration(state.d)`` with ``d = "a" * 28 + "!"`` held the worker for ~30 s;
the lease ran out meanwhile, so the command was claimed again and again until MAX_ATTEMPTS, and
every run queued behind it waited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.waiting import eventually
from workflows import definitions, operations
from workflows.models import Command, HistoryEntry, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET = "LEAK-SENTINEL-25"
BIG = "x" * 200_000
# Each case fails in well under 1 s of the worker's time (0.6 s for all six and the normal run
# on the development machine). The bound is from the run's creation to its failure, so it also
# holds the run's wait for one of the worker's two processes and the filesystem broker's polling
# (5.4 s once on a loaded CI machine); it stays far below the 30 s a single duration() bomb costs
# unbounded, and a lease running out shows as a second attempt, which is asserted separately.
PER_RUN_SECONDS = 10

DOCUMENT = """
definitionId: {id}
definitionVersion: 1
contract: {{name: {id}.v1, signals: {{go: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialState: "payload"
initialStep: route
steps:
  - id: route
    type: decision
    routes:
      - when: {when!r}
        to: wait-go
    default: wait-go
  - id: wait-go
    type: wait-signal
    signal: go
    next: done
  - id: done
    type: complete
"""

ADVERSARIAL: list[tuple[str, str, dict[str, Any]]] = [
    ("duration-bomb", "duration(state.d) > duration('1s')", {"d": "a" * 28 + "!"}),
    ("timestamp-bomb", "timestamp(state.t) > timestamp('2024-01-01T00:00:00Z')", {"t": "2" * 100_000 + SECRET}),
    ("matches-bomb", "state.s.matches(state.p)", {"s": "a" * 100_000, "p": "((a{1000}){1000})" + SECRET}),
    ("concat-bomb", "state.xs.map(x, state.s + state.s).size() > 0", {"xs": list(range(500)), "s": BIG}),
    (
        "fan-out",
        "state.xs.map(x, state).size() > 0 && string(state.xs.map(x, state)) != ''",
        {"xs": list(range(500)), "s": BIG},
    ),
    ("deep-comprehension", "state.xs.all(x, state.xs.exists(y, x * y < 0))", {"xs": list(range(1000))}),
]


def _deploy(definition_id: str, when: str) -> None:
    ref = definitions.load(scope="default", text=DOCUMENT.format(id=definition_id, when=when), format="yaml")
    definitions.publish(scope="default", definition_id=definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=definition_id, version=ref.version, target_scope="default")


def _settled(run_id: Any) -> Callable[[], bool]:
    return lambda: (
        Run.objects.get(pk=run_id).status != "RUNNING"
        and not Command.objects.filter(run_id=run_id, status__in=["PENDING", "CLAIMED", "RUNNING"]).exists()
    )


def test_adversarial_expressions_fail_their_step_fast_while_a_normal_run_completes(
    celery_worker_process: Any,
) -> None:
    for name, when, _ in ADVERSARIAL:
        _deploy(f"sec-{name}", when)
    _deploy("sec-normal", "state.total > 10 && duration(state.wait) < duration('1h')")

    started = time.monotonic()
    bad = {
        name: operations.start(definition_id=f"sec-{name}", payload=payload).run_id for name, _, payload in ADVERSARIAL
    }
    normal = operations.start(definition_id="sec-normal", payload={"total": 42, "wait": "15m"}).run_id
    eventually(
        lambda: Run.objects.get(pk=normal).status == "WAITING",
        timeout=60,
        what="the normal run to reach its wait",
        details=celery_worker_process.logs,
    )
    operations.signal(run_id=normal, name="go")
    for name, run_id in bad.items():
        eventually(_settled(run_id), timeout=60, what=f"the {name} run to settle", details=celery_worker_process.logs)
    eventually(
        lambda: Run.objects.get(pk=normal).status == "COMPLETED",
        timeout=60,
        what="the normal run to complete",
        details=celery_worker_process.logs,
    )
    elapsed = time.monotonic() - started

    # each adversarial run failed its step on the first attempt (no lease ran out, nothing was
    # claimed again), value-free; the 30 s of one duration() bomb alone would blow the bound
    for name, run_id in bad.items():
        run = Run.objects.get(pk=run_id)
        start = Command.objects.get(run_id=run_id, kind="START")
        assert run.status == "FAILED", name
        assert run.failure_code == "DETERMINISTIC_FAILURE", name
        assert run.failure_message.startswith("DETERMINISTIC_FAILURE: routes.0.when of step route failed: "), name
        assert start.status == "FAILED" and start.attempts == 1, name
        assert (run.updated_at - run.created_at).total_seconds() < PER_RUN_SECONDS, name
        history = list(HistoryEntry.objects.filter(run_id=run_id).values_list("outcome", "payload"))
        assert SECRET not in repr(history) and SECRET not in start.last_error, name
    assert elapsed < 4 * PER_RUN_SECONDS
