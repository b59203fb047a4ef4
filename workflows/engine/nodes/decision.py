"""``decision``: the first route whose CEL ``when`` or named condition holds, else ``default``."""

from __future__ import annotations

from workflows.definitions.plan import DecisionStep
from workflows.engine.drive import DeterministicFailure, Drive
from workflows.engine.evaluate import call_callback, evaluate
from workflows.engine.nodes.base import Next, Outcome


def _condition(name: str, state: object, step: str) -> bool:
    try:
        return bool(call_callback(name, "condition", {"state": state}))
    except LookupError as exc:
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: condition of step {step} is not registered") from exc
    except Exception as exc:
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: condition of step {step} failed") from exc


def execute(drive: Drive, step: DecisionStep) -> Outcome:
    state = drive.run["state"]
    chosen = step.default
    conditions: dict[str, bool] = {}
    for route in step.routes:
        if route.when is not None:
            holds = evaluate(route.when, {"state": state, "conditions": conditions}, step=step.id, field="when")
        elif route.condition:
            if route.condition not in conditions:
                named = step.conditions.get(route.condition)
                conditions[route.condition] = (
                    evaluate(named, {"state": state}, step=step.id, field="condition") is True
                    if named is not None
                    else _condition(route.condition, state, step.id)
                )
            holds = conditions[route.condition]
        else:
            holds = False
        if holds is True:
            chosen = route.to
            break
    drive.decide(step=step.id, outcome=chosen)
    return Next(chosen)
