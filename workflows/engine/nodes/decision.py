"""``decision``: the first route whose CEL ``when`` or named condition holds, else ``default``.

A failure names its route as the document numbers it (``routes.0.when``, ``routes.1.condition``).
"""

from __future__ import annotations

from workflows.definitions.plan import DecisionStep
from workflows.engine.context import Drive, step_failed
from workflows.engine.evaluate import call_callback, evaluate, why
from workflows.engine.nodes.base import Next, Outcome


def _condition(name: str, state: object, step: str, field: str) -> bool:
    try:
        return bool(call_callback(name, "condition", {"state": state}))
    except Exception as exc:
        raise step_failed(step, field, why(exc)) from exc


def execute(drive: Drive, step: DecisionStep) -> Outcome:
    state = drive.run["state"]
    chosen = step.default
    # each named condition is evaluated at most once per decision evaluation, when a route
    # first needs it (a ``condition`` route, or a ``when`` that reads ``conditions['id']``)
    conditions: dict[str, bool] = {}

    def named_condition(name: str, field: str) -> bool:
        if name not in conditions:
            named = step.conditions.get(name)
            conditions[name] = (
                evaluate(named, {"state": state}, step=step.id, field=field) is True
                if named is not None
                else _condition(name, state, step.id, field)
            )
        return conditions[name]

    for index, route in enumerate(step.routes):
        if route.when is not None:
            for name in route.uses:
                named_condition(name, f"routes.{index}.when")
            holds = evaluate(
                route.when, {"state": state, "conditions": conditions}, step=step.id, field=f"routes.{index}.when"
            )
        elif route.condition:
            holds = named_condition(route.condition, f"routes.{index}.condition")
        else:
            holds = False
        if holds is True:
            chosen = route.to
            break
    drive.decide(step=step.id, outcome=chosen)
    return Next(chosen)
