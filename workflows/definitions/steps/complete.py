"""The ``complete`` step: the run (or its branch) ends successfully here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import Step, StepType, no_exits

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class CompleteStep(Step):
    pass


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {}


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> CompleteStep:
    return CompleteStep(id=s.get("id") or "", type="complete")


STEP_TYPE = StepType(
    name="complete",
    step_class=CompleteStep,
    read=read,
    required=(),
    optional=(),
    exits=no_exits,
    compile=compile,
    label=pgettext_lazy("step type", "complete"),
    summary=gettext_lazy("end successfully"),
    shape="pill",
    form_fields=(),
    terminal=True,
)
