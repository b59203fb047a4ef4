"""The ``email`` step: send a message whose recipients, subject and body come from the state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import NEXT_FIELD, V_STATE, Computation, FormField, Step, StepType, next_exits

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class EmailStep(Step):
    to: Computation | None = None  # list of addresses or a single address
    subject: str = ""  # template
    body: str = ""  # template
    subject_template: Computation | None = None  # renders ``subject`` (vars: state) -> str
    body_template: Computation | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "to": c.expression(obj.get("to"), f"{at}/to"),
        "subject": c.template(obj.get("subject"), f"{at}/subject") or "",
        "body": c.template(obj.get("body"), f"{at}/body") or "",
        "next": c.ref(obj, at, "next"),
    }


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> EmailStep:
    return EmailStep(
        id=s.get("id") or "",
        type="email",
        next=s.get("next"),
        to=build.computation(s.get("to"), f"{at}/to", V_STATE),
        subject=s.get("subject") or "",
        body=s.get("body") or "",
        subject_template=build.template(s.get("subject"), f"{at}/subject"),
        body_template=build.template(s.get("body"), f"{at}/body"),
    )


STEP_TYPE = StepType(
    name="email",
    step_class=EmailStep,
    read=read,
    required=("to", "subject", "next"),
    optional=("body",),
    exits=next_exits,
    compile=compile,
    label=pgettext_lazy("step type", "email"),
    summary=gettext_lazy("send a message"),
    shape="envelope",
    form_fields=(
        FormField("to", "To (CEL)", "cel", "An address or a list of addresses, from state.", "state", required=True),
        FormField("subject", "Subject", "template", "{{ state.x }} placeholders allowed.", "state"),
        FormField("body", "Body", "longtemplate", "{{ state.x }} placeholders allowed.", "state"),
        NEXT_FIELD,
    ),
    effect=True,
)
