"""The ``timer`` step: wait for a duration or until an instant, optionally updating the state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    NEXT_FIELD,
    V_STATE,
    Computation,
    Delay,
    FormField,
    Step,
    StepType,
    next_exits,
    read_delayed_exit,
    source_field,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class TimerStep(Step):
    delay: Delay = field(default_factory=Delay)
    set: Computation | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return read_delayed_exit(obj, at, c)


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> TimerStep:
    return TimerStep(
        id=s.get("id") or "",
        type="timer",
        next=s.get("next"),
        delay=build.delay(s.get("delay"), at),
        set=build.computation(s.get("set"), f"{at}/{source_field(s.get('set'), 'set', 'mutator')}", V_STATE),
    )


STEP_TYPE = StepType(
    name="timer",
    step_class=TimerStep,
    read=read,
    required=("next",),
    optional=("after", "at", "fireAt", "set", "mutator"),
    exits=next_exits,
    compile=compile,
    label=pgettext_lazy("step type", "timer"),
    summary=gettext_lazy("wait for a time"),
    shape="clock",
    form_fields=(
        FormField("after", "Wait for", "duration", "ISO-8601 duration, for example PT10M. Or give 'Until'."),
        FormField("at", "Until (CEL)", "cel", 'An instant from state, for example timestamp("2030-01-01T09:00:00Z").'),
        FormField("set", "Set when it fires (CEL)", "cel", "A map merged into the state.", "state"),
        NEXT_FIELD,
    ),
)
