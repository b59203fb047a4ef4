"""``decision``: the first route whose CEL ``when`` or named condition holds, else ``default``."""

from __future__ import annotations

from workflows.definitions.plan import DecisionStep
from workflows.engine.context import DeterministicFailure, Drive
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
    # each named condition is evaluated at most once per decision evaluation, when a route
    # first needs it (a ``condition`` route, or a ``when`` that reads ``conditions['id']``)
    conditions: dict[str, bool] = {}

    def named_condition(name: str) -> bool:
        if name not in conditions:
            named = step.conditions.get(name)
            conditions[name] = (
                evaluate(named, {"state": state}, step=step.id, field="condition") is True
                if named is not None
                else _condition(name, state, step.id)
            )
        return conditions[name]

    for route in step.routes:
        if route.when is not None:
            for name in route.uses:
                named_condition(name)
            holds = evaluate(route.when, {"state": state, "conditions": conditions}, step=step.id, field="when")
        elif route.condition:
            holds = named_condition(route.condition)
        else:
            holds = False
        if holds is True:
            chosen = route.to
            break
    drive.decide(step=step.id, outcome=chosen)
    return Next(chosen)
