"""The ``call`` step: run another workflow as a child and continue with its result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    NEXT_FIELD,
    V_CALL_RESULT,
    V_STATE,
    Computation,
    FormField,
    Step,
    StepType,
    failure_exits,
    source_field,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class CallStep(Step):
    definition_id: str = ""
    version: int | None = None
    payload: Computation | None = None  # vars: state
    set: Computation | None = None  # vars: state, result (child's state), status
    on_failure: str | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "definitionId": c.name(obj.get("definitionId"), f"{at}/definitionId", "definitionId"),
        "version": c.integer(obj.get("version"), f"{at}/version"),
        "payload": c.value_or_callback(obj, at, cel="payload", callback="payloadMapper", category="payload_mapper"),
        "set": c.value_or_callback(obj, at, cel="set", callback=None, category=None, merge=True),
        "next": c.ref(obj, at, "next"),
        "onFailure": c.ref(obj, at, "onFailure"),
    }


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> CallStep:
    payload = s.get("payload")
    return CallStep(
        id=s.get("id") or "",
        type="call",
        next=s.get("next"),
        definition_id=s.get("definitionId") or "",
        version=s.get("version"),
        payload=build.computation(payload, f"{at}/{source_field(payload, 'payload', 'payloadMapper')}", V_STATE),
        set=build.computation(s.get("set"), f"{at}/set", V_CALL_RESULT),
        on_failure=s.get("onFailure"),
    )


STEP_TYPE = StepType(
    name="call",
    step_class=CallStep,
    read=read,
    required=("definitionId", "next"),
    optional=("version", "payloadMapper", "payload", "set", "onFailure"),
    exits=failure_exits,
    compile=compile,
    label=pgettext_lazy("step type", "call"),
    summary=gettext_lazy("run another workflow"),
    shape="subroutine",
    form_fields=(
        FormField("definitionId", "Workflow to call", help="The definition id of the child workflow.", required=True),
        FormField("version", "Version", "int", "Leave empty for the child's current version."),
        FormField("payload", "Payload (CEL)", "cel", "The child's start payload, from state.", "state"),
        FormField("set", "Set from result (CEL)", "cel", "From state, result (the child's state) and status.", "call"),
        NEXT_FIELD,
        FormField("onFailure", "On failure go to", "step"),
    ),
    effect=True,
)
