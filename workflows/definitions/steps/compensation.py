"""The ``compensation`` step: undo a service step (run when the run is compensated, not by flow)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    V_STATE,
    Computation,
    FormField,
    Step,
    StepType,
    check_target,
    no_exits,
    source_field,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class CompensationStep(Step):
    forward_step: str = ""
    target: str = ""
    payload: Computation | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "forwardStep": c.ref(obj, at, "forwardStep"),
        "target": c.string(obj.get("target"), f"{at}/target", max_length=2048),
        "payload": c.value_or_callback(obj, at, cel="payload", callback="payloadMapper", category="payload_mapper"),
    }


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> CompensationStep:
    target_name = s.get("target") or ""
    check_target(build, target_name, at)
    payload = s.get("payload")
    return CompensationStep(
        id=s.get("id") or "",
        type="compensation",
        forward_step=s.get("forwardStep") or "",
        target=target_name,
        payload=build.computation(payload, f"{at}/{source_field(payload, 'payload', 'payloadMapper')}", V_STATE),
    )


STEP_TYPE = StepType(
    name="compensation",
    step_class=CompensationStep,
    read=read,
    required=("forwardStep", "target"),
    optional=("payloadMapper", "payload"),
    exits=no_exits,
    compile=compile,
    label=pgettext_lazy("step type", "compensation"),
    summary=gettext_lazy("undo a service"),
    shape="dashed",
    form_fields=(
        FormField("forwardStep", "Undoes service step", "step", required=True),
        FormField("target", "Target", help="A registered service handler or an https:// webhook URL.", required=True),
        FormField("payload", "Payload (CEL)", "cel", "What is sent, computed from state.", "state"),
    ),
)
