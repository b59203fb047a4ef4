"""The ``end`` step: terminate the run (COMPLETED), tearing down everything still open."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import FormField, Step, StepType, no_exits

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class EndStep(Step):
    """Terminate: the run ends here (COMPLETED) and everything open is torn down."""

    reason: str | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {"reason": c.string(obj.get("reason"), f"{at}/reason", max_length=255)}


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> EndStep:
    return EndStep(id=s.get("id") or "", type="end", reason=s.get("reason"))


STEP_TYPE = StepType(
    name="end",
    step_class=EndStep,
    read=read,
    required=(),
    optional=("reason",),
    exits=no_exits,
    compile=compile,
    label=pgettext_lazy("step type", "end"),
    summary=gettext_lazy("terminate the run"),
    shape="double-pill",
    form_fields=(FormField("reason", "Reason", help="Why the run ends here (optional)."),),
    terminal=True,
)
