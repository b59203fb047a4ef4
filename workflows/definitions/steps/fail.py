"""The ``fail`` step: the run ends as failed, with an error type and a message."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import V_STATE, Computation, FormField, Step, StepType, no_exits

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class FailStep(Step):
    error_type: str = "failed"
    message: Computation | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    chosen = c.exclusive(obj, at, "message", "messageFactory")
    message: dict[str, Any] | None = None
    if chosen == "message":
        text = c.template(obj["message"], f"{at}/message")
        message = {"template": text} if text is not None else None
    elif chosen == "messageFactory":
        message = c.callback(obj["messageFactory"], f"{at}/messageFactory", "fail_message")
    return {
        "errorType": c.name(obj.get("errorType"), f"{at}/errorType", "errorType") or "failed",
        "message": message,
    }


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> FailStep:
    message = s.get("message")
    where = f"{at}/messageFactory" if message and "callback" in message else f"{at}/message"
    return FailStep(
        id=s.get("id") or "",
        type="fail",
        error_type=s.get("errorType") or "failed",
        message=build.computation(message, where, V_STATE),
    )


STEP_TYPE = StepType(
    name="fail",
    step_class=FailStep,
    read=read,
    required=(),
    optional=("errorType", "message", "messageFactory"),
    exits=no_exits,
    compile=compile,
    label=pgettext_lazy("step type", "fail"),
    summary=gettext_lazy("end as failed"),
    shape="octagon",
    form_fields=(
        FormField("errorType", "Error type", help="A short code for the failure, for example request-rejected."),
        FormField("message", "Message", "template", "{{ state.x }} placeholders allowed.", "state"),
    ),
    terminal=True,
)
