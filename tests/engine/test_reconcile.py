"""Reconciling an OUTCOME_UNKNOWN command: replay runs the effect again, resolve skips it;
administrators only, a reason required, who/when/why kept."""

from __future__ import annotations

from typing import Any

import pytest

from workflows import operations
from workflows.definitions import catalogs
from workflows.exceptions import CommandNotFound, CommandNotReconcilable, InvalidPayload, NotPermitted
from workflows.models import Command, HistoryEntry, Run

CHARGED = """
definitionId: charged
definitionVersion: 1
contract: {name: charged.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: charge
steps:
  - id: charge
    type: script
    script: test.charge
    set: "{'charged': result}"
    next: receipt
  - id: receipt
    type: script
    script: test.receipt
    next: done
  - id: done
    type: complete
"""
CALLS: list[str] = []


@pytest.fixture
def scripts() -> Any:
    behaviour: dict[str, Any] = {"fail": True}

    def charge(input: Any) -> Any:
        CALLS.append("charge")
        if behaviour["fail"]:
            raise RuntimeError("card declined 4111")
        return 42

    def receipt(input: Any) -> Any:
        CALLS.append("receipt")
        return None

    catalogs.callbacks.add("test.charge", charge, category="script")
    catalogs.callbacks.add("test.receipt", receipt, category="script")
    yield behaviour
    catalogs.callbacks.unregister("test.charge", "script")
    catalogs.callbacks.unregister("test.receipt", "script")
    CALLS.clear()


@pytest.fixture
def unknown(deploy: Any, drain: Any, scripts: Any) -> Command:
    """A START whose script failed after its effect marker: OUTCOME_UNKNOWN."""
    deploy(CHARGED)
    run_id = operations.start(definition_id="charged", payload={"order": "O-1"}).run_id
    drain()
    command = Command.objects.get(run_id=run_id, kind="START")
    assert command.status == "OUTCOME_UNKNOWN" and CALLS == ["charge"]
    scripts["fail"] = False
    return command


@pytest.mark.django_db(transaction=True)
def test_resolve_continues_after_the_effect_without_running_it(unknown: Command, drain: Any, demo_users: Any) -> None:
    recorded = operations.reconcile_command(
        command_id=unknown.id, action="resolve", reason="charge visible at the bank", actor=demo_users["admin"]
    )
    assert recorded.status == "PENDING"
    command = Command.objects.get(pk=unknown.id)
    assert command.status == "PENDING" and command.attempts == 0
    assert (command.reconcile_action, command.reconciled_by) == ("resolve", "admin")
    assert command.reconcile_reason == "charge visible at the bank" and command.reconciled_at is not None
    assert command.target["resolved_step"] == "charge"

    drain()
    run = Run.objects.get(pk=unknown.run_id)
    assert run.status == "COMPLETED"
    assert CALLS == ["charge", "receipt"]  # the charge was not made twice
    types = list(HistoryEntry.objects.filter(run_id=run.id).order_by("seq").values_list("type", flat=True))
    assert "COMMAND_RECONCILED" in types and "EFFECT_RESOLVED" in types
    entry = HistoryEntry.objects.get(run_id=run.id, type="COMMAND_RECONCILED")
    assert (entry.actor_kind, entry.actor_id, entry.step) == ("USER", "admin", "charge")
    assert entry.payload == {"action": "resolve", "reason": "charge visible at the bank"}


@pytest.mark.django_db(transaction=True)
def test_replay_runs_the_command_again_effect_included(unknown: Command, drain: Any, demo_users: Any) -> None:
    operations.reconcile_command(
        command_id=unknown.id, action="replay", reason="nothing at the bank", actor=demo_users["admin"]
    )
    drain()
    assert Run.objects.get(pk=unknown.run_id).status == "COMPLETED"
    assert CALLS == ["charge", "charge", "receipt"]
    assert Command.objects.get(pk=unknown.id).reconcile_action == "replay"


@pytest.mark.django_db(transaction=True)
def test_reconcile_is_for_administrators_with_a_reason(unknown: Command, demo_users: Any) -> None:
    with pytest.raises(NotPermitted) as refused:
        operations.reconcile_command(command_id=unknown.id, action="replay", reason="x", actor=demo_users["alice"])
    assert refused.value.code == "NOT_PERMITTED" and refused.value.status == 403
    with pytest.raises(NotPermitted):
        operations.reconcile_command(command_id=unknown.id, action="replay", reason="x", actor=None)
    with pytest.raises(InvalidPayload) as blank:
        operations.reconcile_command(command_id=unknown.id, action="replay", reason=" \n ", actor=demo_users["admin"])
    assert [v.pointer for v in blank.value.violations] == ["/reason"]
    with pytest.raises(InvalidPayload) as bad_action:
        operations.reconcile_command(command_id=unknown.id, action="skip-it", reason="r", actor=demo_users["admin"])
    assert "skip-it" not in bad_action.value.message
    assert Command.objects.get(pk=unknown.id).status == "OUTCOME_UNKNOWN"  # nothing changed


@pytest.mark.django_db(transaction=True)
def test_only_outcome_unknown_commands_can_be_reconciled(unknown: Command, drain: Any, demo_users: Any) -> None:
    admin = demo_users["admin"]
    operations.reconcile_command(command_id=unknown.id, action="replay", reason="checked", actor=admin)
    with pytest.raises(CommandNotReconcilable) as again:
        operations.reconcile_command(command_id=unknown.id, action="replay", reason="checked", actor=admin)
    assert again.value.code == "COMMAND_NOT_RECONCILABLE"
    with pytest.raises(CommandNotFound):
        operations.reconcile_command(command_id=987654321, action="replay", reason="checked", actor=admin)
    with pytest.raises(CommandNotFound):
        operations.reconcile_command(command_id="not-a-number", action="replay", reason="checked", actor=admin)
