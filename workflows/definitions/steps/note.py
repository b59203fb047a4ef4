"""The ``note`` step: record a line in the run's decisions and continue (an example step type)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import NEXT_FIELD, FormField, Step, StepType, next_exits

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class NoteStep(Step):
    text: str = ""


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {"text": c.string(obj.get("text"), f"{at}/text", max_length=255) or "", "next": c.ref(obj, at, "next")}


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> NoteStep:
    return NoteStep(id=s.get("id") or "", type="note", next=s.get("next"), text=s.get("text") or "")


STEP_TYPE = StepType(
    name="note",
    step_class=NoteStep,
    read=read,
    required=("next",),
    optional=("text",),
    exits=next_exits,
    compile=compile,
    label="note",
    summary="record a note and continue",
    shape="box",
    form_fields=(FormField("text", "Text", help="What the run's history records."), NEXT_FIELD),
)
