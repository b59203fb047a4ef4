"""Effect nodes (email, agent, script): a marker before the effect; interrupted → OUTCOME_UNKNOWN."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail

from workflows import operations
from workflows.definitions import catalogs
from workflows.engine import db, executor
from workflows.models import Command, EffectMarker, Run

SCRIPTED = """
definitionId: scripted
definitionVersion: 1
contract: {name: scripted.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: notify
steps:
  - id: notify
    type: email
    to: "state.email"
    subject: "Order {{ state.order }} received"
    body: "We got order {{ state.order }}."
    next: charge
  - id: charge
    type: script
    script: test.charge
    set: "{'charged': result}"
    next: done
  - id: done
    type: complete
"""
CALLS: list[Any] = []


@pytest.fixture
def charge() -> Any:
    behaviour: dict[str, Any] = {"fail": False}

    def run(input: Any) -> Any:
        CALLS.append(input)
        if behaviour["fail"]:
            raise RuntimeError("card declined")
        return 42

    catalogs.callbacks.add("test.charge", run, category="script")
    yield behaviour
    catalogs.callbacks.unregister("test.charge", "script")
    CALLS.clear()


@pytest.mark.django_db(transaction=True)
def test_email_and_script_run_once_with_markers(deploy: Any, drain: Any, charge: Any, settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    deploy(SCRIPTED)
    run_id = operations.start(definition_id="scripted", payload={"email": "a@example.com", "order": "O-1"}).run_id
    drain()
    run = Run.objects.get(pk=run_id)
    assert run.status == "COMPLETED" and run.state["charged"] == 42
    assert len(mail.outbox) == 1 and mail.outbox[0].subject == "Order O-1 received"
    assert len(CALLS) == 1
    assert EffectMarker.objects.filter(run_id=run_id).count() == 2


@pytest.mark.django_db(transaction=True)
def test_effect_that_fails_after_its_marker_is_outcome_unknown_and_never_replayed(
    deploy: Any, drain: Any, charge: Any
) -> None:
    charge["fail"] = True
    deploy(
        SCRIPTED.replace("type: email", "type: script\n    script: test.charge").replace(
            '    to: "state.email"\n'
            '    subject: "Order {{ state.order }} received"\n'
            '    body: "We got order {{ state.order }}."\n',
            "",
        )
    )
    run_id = operations.start(definition_id="scripted", payload={"order": "O-2"}).run_id
    drain()
    start = Command.objects.get(run_id=run_id, kind="START")
    assert start.status == "OUTCOME_UNKNOWN"
    assert start.last_error.startswith("OUTCOME_UNKNOWN:") and "declined" not in start.last_error
    drain()
    assert len(CALLS) == 1  # not replayed automatically


@pytest.mark.django_db(transaction=True)
def test_crash_after_marker_becomes_outcome_unknown_at_lease_expiry(deploy: Any, charge: Any) -> None:
    deploy(SCRIPTED)
    run_id = operations.start(definition_id="scripted", payload={"email": "b@example.com", "order": "O-3"}).run_id
    head = executor.peek(5, run_id)[0]
    token = executor.claim(head, lease_seconds=30, max_attempts=5)
    from workflows.engine import effects

    effects.mark_started(command_id=head.id, run_id=run_id, token=token, step="notify")  # then the worker "dies"
    db.execute("UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE id = %s", [head.id])
    assert executor.recover_expired_leases() == 1
    assert Command.objects.get(pk=head.id).status == "OUTCOME_UNKNOWN"
    assert executor.drain(run_id=run_id, budget_seconds=5) == 0
