"""``service``: record a service dispatch as an outbox intent, delivered after commit.

The step does not wait for its handler (the reference's "record a service-dispatch side
effect"): the intent commits with the segment and is delivered afterwards, at least once, so
no answer of the handler exists while the step runs. Its ``set`` therefore reads ``result``
as *the dispatch it recorded*: ``{"target", "payload", "idempotencyKey"}``. A handler that
has something to say sends it back as a signal the run waits for after the step.
"""

from __future__ import annotations

from typing import Any

from workflows.definitions.plan import ServiceStep
from workflows.engine import outbox
from workflows.engine.context import Drive
from workflows.engine.evaluate import apply_set, evaluate
from workflows.engine.nodes.base import Next, Outcome
from workflows.engine.outbox.recording import plain_name


def dispatch_result(target: str, payload: Any, key: str) -> dict[str, Any]:
    """What a service step's ``set`` reads as ``result``. A webhook's address is not repeated
    (it may carry a credential in its query), as in the history's SERVICE_DISPATCHED entry."""
    return {"target": target if plain_name(target) else "[webhook]", "payload": payload, "idempotencyKey": key}


def execute(drive: Drive, step: ServiceStep) -> Outcome:
    state = drive.run["state"]
    payload: Any = state
    if step.payload is not None:
        payload = evaluate(step.payload, {"state": state}, step=step.id, field="payload")
    key = outbox.record(drive, step=step.id, kind="SERVICE", target=step.target, payload=payload)
    if step.compensation:
        done = list(drive.run.get("compensation") or [])
        done.append({"step": step.id, "compensation": step.compensation})
        drive.run["compensation"] = done
    result = dispatch_result(step.target, payload, key)
    new_state = apply_set(step.set, state, {"state": state, "result": result}, step=step.id, field="set")
    drive.decide(step=step.id, outcome="intent", new_state=new_state, change=step.set is not None)
    if not step.next:
        return Next("")
    return Next(step.next)
