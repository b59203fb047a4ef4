"""``service``: record a service dispatch as an outbox intent, delivered after commit."""

from __future__ import annotations

from typing import Any

from workflows.definitions.plan import ServiceStep
from workflows.engine import outbox
from workflows.engine.context import Drive
from workflows.engine.evaluate import apply_set, evaluate
from workflows.engine.nodes.base import Next, Outcome


def execute(drive: Drive, step: ServiceStep) -> Outcome:
    state = drive.run["state"]
    payload: Any = state
    if step.payload is not None:
        payload = evaluate(step.payload, {"state": state}, step=step.id, field="payload")
    outbox.record(drive, step=step.id, kind="SERVICE", target=step.target, payload=payload)
    if step.compensation:
        done = list(drive.run.get("compensation") or [])
        done.append({"step": step.id, "compensation": step.compensation})
        drive.run["compensation"] = done
    new_state = apply_set(step.set, state, {"state": state, "payload": payload}, step=step.id, field="set")
    drive.decide(step=step.id, outcome="intent", new_state=new_state, change=step.set is not None)
    if not step.next:
        return Next("")
    return Next(step.next)
