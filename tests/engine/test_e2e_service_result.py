"""A service step's ``set`` reads ``result``, through a real worker.

Regression (issue 39): docs/authoring.md says a service step's ``set`` may read ``result`` and
showed it in its example; the compiler admitted ``result`` but the engine evaluated ``set`` with
``state`` and ``payload`` only, so every run of such a document failed with
``DETERMINISTIC_FAILURE: set of step … failed``. A service step does not wait for its handler
(the dispatch is delivered after commit, at least once), so ``result`` is the dispatch it
recorded: ``{"target", "payload", "idempotencyKey"}``; the handler's answer comes back as a
signal.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.waiting import eventually
from workflows import operations
from workflows.models import HistoryEntry, OutboxIntent, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DOCUMENT = """
definitionId: service-result
definitionVersion: 1
contract:
  name: service-result.v1
  signals:
    answered: {type: object, required: [accepted], properties: {accepted: {type: boolean}}}
initialState: '{"number": payload.number}'
initialStep: order
steps:
  - id: order
    type: service
    target: test.answer_by_signal
    payload: '{"definition": "service-result", "key": state.number, "lines": 3}'
    set: '{"sent": result.payload.lines, "to": result.target, "dispatch": result.idempotencyKey}'
    next: wait-answer
  - id: wait-answer
    type: wait-signal
    signal: answered
    set: '{"accepted": payload.accepted}'
    next: done
  - id: done
    type: complete
"""


def test_service_set_reads_the_dispatch_and_the_handler_answers_by_signal(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(DOCUMENT)
    recorded = operations.start(definition_id="service-result", business_key="SR-1", payload={"number": "SR-1"})

    eventually(
        lambda: Run.objects.get(pk=recorded.run_id).status in ("COMPLETED", "FAILED"),
        timeout=60,
        what="the run to end (service, the handler's signal, complete)",
        details=celery_worker_process.logs,
    )
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.failure_code) == ("COMPLETED", "")
    intent = OutboxIntent.objects.get(run_id=recorded.run_id, kind="SERVICE")
    assert run.state == {
        "number": "SR-1",
        "sent": 3,
        "to": "test.answer_by_signal",
        "dispatch": intent.idempotency_key,  # the key the handler received with the dispatch
        "accepted": True,
    }
    types = list(HistoryEntry.objects.filter(run_id=recorded.run_id).order_by("seq").values_list("type", flat=True))
    assert types.count("SERVICE_DISPATCHED") == 1 and "WORKFLOW_COMPLETED" in types
