"""The ``script`` step: run a registered script (a callable) and merge its result into the state."""

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
class ScriptStep(Step):
    script: str = ""  # registered callable
    input: Computation | None = None
    set: Computation | None = None
    call: Computation | None = None  # the registered script (vars: input, state) -> result


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> ScriptStep:
    ref = s.get("script")
    call = build.callback(ref, f"{at}/script", V_CALLABLE) if ref else None  # reported before input and set
    return ScriptStep(
        id=s.get("id") or "",
        type="script",
        next=s.get("next"),
        script=ref["callback"] if ref else "",
        input=build.computation(s.get("input"), f"{at}/input", V_STATE),
        set=build.computation(s.get("set"), f"{at}/set", V_RESULT),
        call=call,
    )


STEP_TYPE = StepType(
    name="script",
    step_class=ScriptStep,
    read=callable_reader("script", "script"),
    required=("script", "next"),
    optional=("input", "set"),
    exits=next_exits,
    compile=compile,
    label=pgettext_lazy("step type", "script"),
    summary=gettext_lazy("run a registered script"),
    shape="parallelogram",
    form_fields=callable_fields("script", "script"),
    effect=True,
)
