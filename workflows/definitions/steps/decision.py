"""The ``decision`` step: the first route whose condition holds, otherwise the default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    V_STATE,
    V_WHEN,
    Computation,
    Exit,
    FormField,
    Step,
    StepType,
    entries,
    target,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class Route:
    to: str
    when: Computation | None = None  # CEL boolean
    condition: str | None = None  # named condition callback
    uses: tuple[str, ...] = ()  # the named conditions ``when`` reads (``conditions['id']``)


@dataclass(frozen=True)
class DecisionStep(Step):
    routes: tuple[Route, ...] = ()
    default: str = ""
    # named conditions the routes use: name -> callback computation (vars: state); evaluate
    # each once per decision evaluation
    conditions: Mapping[str, Computation] = field(default_factory=dict)


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    routes: list[dict[str, Any]] = []
    raw = obj.get("routes")
    if raw is not None and (not isinstance(raw, list) or not raw):
        c.add(f"{at}/routes", "type", "routes must be a non-empty list")
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        here = f"{at}/routes/{index}"
        r = c.fields(item, here, required=("to",), optional=("when", "condition"), what="route")
        if r is None:
            continue
        chosen = c.exclusive(r, here, "when", "condition", required=True)
        route: dict[str, Any] = {"to": c.ref(r, here, "to")}
        if chosen == "when":
            route["when"] = c.expression(r["when"], f"{here}/when")
        elif chosen == "condition":
            route["condition"] = c.callback(r["condition"], f"{here}/condition", "condition")
        routes.append(route)
    return {"routes": routes, "default": c.ref(obj, at, "default")}


def _route_label(route: Mapping[str, Any]) -> str:
    """A route's condition as the graph writes it: the callback name or the CEL text."""
    for key, inner in (("condition", "callback"), ("when", "cel")):
        value = route.get(key)
        if isinstance(value, Mapping) and value.get(inner):
            return str(value[inner])
        if isinstance(value, str) and value:
            return value  # a raw document's spelling
    return ""


def exits(step: Mapping[str, Any]) -> list[Exit]:
    found: list[Exit] = []
    for i, route in entries(step.get("routes")):
        leads_to = target(route.get("to"))
        if leads_to:
            found.append(Exit(f"/routes/{i}/to", leads_to, "route", _route_label(route)))
    default = target(step.get("default"))
    if default:
        found.append(Exit("/default", default, "default", "default"))
    return found


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> DecisionStep:
    routes = []
    conditions: dict[str, Any] = {}
    for index, r in enumerate(s.get("routes") or []):
        condition = None
        when = None
        uses: tuple[str, ...] = ()
        if r.get("when"):
            where = f"{at}/routes/{index}/when"
            when = build.computation(r["when"], where, V_WHEN)
            uses = build.conditions_read(when, where, conditions)
        elif r.get("condition"):
            condition = r["condition"]["callback"]
            found = build.callback(r["condition"], f"{at}/routes/{index}/condition", V_STATE)
            if found is not None:
                conditions[condition] = found
        routes.append(Route(to=r.get("to") or "", when=when, condition=condition, uses=uses))
    return DecisionStep(
        id=s.get("id") or "",
        type="decision",
        routes=tuple(routes),
        default=s.get("default") or "",
        conditions=conditions,
    )


STEP_TYPE = StepType(
    name="decision",
    step_class=DecisionStep,
    read=read,
    required=("routes", "default"),
    optional=(),
    exits=exits,
    compile=compile,
    label=pgettext_lazy("step type", "decision"),
    summary=gettext_lazy("route on a condition"),
    shape="diamond",
    form_fields=(
        FormField("default", "Otherwise go to", "step", "Where a run goes when no route holds.", required=True),
    ),
    form_rows=("routes", (FormField("when", "When (CEL)", "cel", variables="when"), FormField("to", "Go to", "step"))),
)
