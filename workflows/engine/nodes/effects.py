"""``email``, ``agent`` and ``script``: effects that run inside the segment, once.

Each commits an effect marker on a second connection first (see ``engine/effects.py``), so
an interrupted segment is OUTCOME_UNKNOWN rather than replayed.
"""

from __future__ import annotations

import logging
from typing import Any

from workflows.definitions.plan import AgentStep, EmailStep, ScriptStep
from workflows.engine import effects, mail
from workflows.engine.context import DeterministicFailure, Drive, step_failed
from workflows.engine.evaluate import apply_set, call_callback, evaluate, json_kind, render, why
from workflows.engine.nodes.base import Next, Outcome

log = logging.getLogger("workflows.engine")


def _marker(drive: Drive, step: str) -> bool:
    """Commit the marker; False when an administrator resolved this effect as already done."""
    if drive.resolved_effect == step:
        drive.resolved_effect = ""
        drive.history.add("EFFECT_RESOLVED", step=step, command_id=drive.command_id, actor=drive.actor)
        return False
    if drive.command_id is not None and drive.token is not None:
        effects.mark_started(command_id=drive.command_id, run_id=drive.run["id"], token=drive.token, step=step)
    return True


def email(drive: Drive, step: EmailStep) -> Outcome:
    variables = {"state": drive.run["state"]}
    recipients: Any = evaluate(step.to, variables, step=step.id, field="to") if step.to is not None else []
    if isinstance(recipients, str):
        recipients = [recipients]
    if not isinstance(recipients, list) or not all(isinstance(r, str) for r in recipients):
        raise step_failed(step.id, "to", f"must give an address or a list of addresses, gave {json_kind(recipients)}")
    subject = render(step.subject, variables, step=step.id, field="subject")
    body = render(step.body, variables, step=step.id, field="body")
    # built and checked before the marker commits: a message the backend would refuse (a line
    # break in the subject or an address, an invalid address) fails the step deterministically
    # instead of leaving an effect that never happened OUTCOME_UNKNOWN
    try:
        message = mail.build(subject, body, recipients)
    except mail.Unsendable as refused:
        raise DeterministicFailure(f"EMAIL_INVALID: email of step {step.id}: {refused.reason}") from None
    if _marker(drive, step.id):
        message.send(fail_silently=False)
    drive.history.add(
        "EMAIL_SENT",
        step=step.id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"recipients": len(recipients)},
    )
    drive.decide(step=step.id, outcome="email")
    return Next(step.next or "")


def _callable_step(drive: Drive, step: AgentStep | ScriptStep, name: str, category: str, outcome: str) -> Outcome:
    from workflows.definitions import catalogs

    state = drive.run["state"]
    catalogs.ensure_discovered()
    if catalogs.callbacks.get(name, category) is None:
        raise step_failed(step.id, category, "the callback is not registered")
    value = evaluate(step.input, {"state": state}, step=step.id, field="input") if step.input is not None else state
    result: Any = None
    if _marker(drive, step.id):
        try:
            result = call_callback(name, category, {"input": value, "state": state, "payload": value})
        except Exception as exc:
            log.debug("%s %s failed", category, step.id, exc_info=True)
            raise step_failed(step.id, category, why(exc)) from exc
    new_state = apply_set(step.set, state, {"state": state, "result": result}, step=step.id, field="set")
    drive.decide(step=step.id, outcome=outcome, new_state=new_state, change=step.set is not None)
    return Next(step.next or "")


def agent(drive: Drive, step: AgentStep) -> Outcome:
    return _callable_step(drive, step, step.agent, "agent", "agent")


def script(drive: Drive, step: ScriptStep) -> Outcome:
    return _callable_step(drive, step, step.script, "script", "script")
