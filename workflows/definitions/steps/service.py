"""The ``service`` step: call a registered handler or an https:// webhook, merge its result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    NEXT_FIELD,
    V_RESULT,
    V_STATE,
    Computation,
    Exit,
    FormField,
    Step,
    StepType,
    check_target,
    next_exits,
    source_field,
    target,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class ServiceStep(Step):
    target: str = ""  # registered handler name or an https:// webhook URL
    payload: Computation | None = None  # payloadMapper / CEL
    set: Computation | None = None  # result -> state (vars: state, result)
    compensation: str | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "target": c.string(obj.get("target"), f"{at}/target", max_length=2048),
        "payload": c.value_or_callback(obj, at, cel="payload", callback="payloadMapper", category="payload_mapper"),
        "set": c.value_or_callback(obj, at, cel="set", callback=None, category=None, merge=True),
        "next": c.ref(obj, at, "next"),
        "compensation": c.ref(obj, at, "compensation"),
    }


def exits(step: Mapping[str, Any]) -> list[Exit]:
    found = next_exits(step)
    compensation = target(step.get("compensation"))
    if compensation:
        found.append(Exit("/compensation", compensation, "compensation", flow=False))
    return found


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> ServiceStep:
    target_name = s.get("target") or ""
    check_target(build, target_name, at)
    payload = s.get("payload")
    return ServiceStep(
        id=s.get("id") or "",
        type="service",
        next=s.get("next"),
        target=target_name,
        payload=build.computation(payload, f"{at}/{source_field(payload, 'payload', 'payloadMapper')}", V_STATE),
        set=build.computation(s.get("set"), f"{at}/set", V_RESULT),
        compensation=s.get("compensation"),
    )


STEP_TYPE = StepType(
    name="service",
    step_class=ServiceStep,
    read=read,
    required=("target", "next"),
    optional=("payloadMapper", "payload", "set", "compensation"),
    exits=exits,
    compile=compile,
    label=pgettext_lazy("step type", "service"),
    summary=gettext_lazy("call a handler or webhook"),
    shape="box",
    form_fields=(
        FormField("target", "Target", help="A registered service handler or an https:// webhook URL.", required=True),
        FormField("payload", "Payload (CEL)", "cel", "What is sent, computed from state.", "state"),
        FormField(
            "set", "Set from result (CEL)", "cel", "A map merged into the state, from state and result.", "result"
        ),
        NEXT_FIELD,
        FormField("compensation", "Compensation step", "step", "The compensation step that undoes this service."),
    ),
    effect=True,
)
