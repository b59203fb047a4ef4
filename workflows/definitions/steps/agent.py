"""The ``agent`` step: ask a registered agent (a callable) and merge its answer into the state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.steps.base import (
    V_CALLABLE,
    V_RESULT,
    V_STATE,
    Computation,
    Step,
    StepType,
    callable_fields,
    callable_reader,
    next_exits,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class AgentStep(Step):
    agent: str = ""  # registered callable
    input: Computation | None = None
    set: Computation | None = None  # vars: state, result
    call: Computation | None = None  # the registered agent (vars: input, state) -> result


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> AgentStep:
    ref = s.get("agent")
    call = build.callback(ref, f"{at}/agent", V_CALLABLE) if ref else None  # reported before input and set
    return AgentStep(
        id=s.get("id") or "",
        type="agent",
        next=s.get("next"),
        agent=ref["callback"] if ref else "",
        input=build.computation(s.get("input"), f"{at}/input", V_STATE),
        set=build.computation(s.get("set"), f"{at}/set", V_RESULT),
        call=call,
    )


STEP_TYPE = StepType(
    name="agent",
    step_class=AgentStep,
    read=callable_reader("agent", "agent"),
    required=("agent", "next"),
    optional=("input", "set"),
    exits=next_exits,
    compile=compile,
    label=pgettext_lazy("step type", "agent"),
    summary=gettext_lazy("ask a registered agent"),
    shape="double-border",
    form_fields=callable_fields("agent", "agent"),
    effect=True,
)
