"""The ``fork`` step: start parallel branches that all lead to one join."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import Exit, FormField, Step, StepType, target

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class ForkStep(Step):
    branches: tuple[str, ...] = ()  # first step id of each branch
    join: str = ""
    retry_max_attempts: int = 0


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    branches: list[str | None] = []
    raw = obj.get("branches")
    if raw is not None and (not isinstance(raw, list) or not raw):
        c.add(f"{at}/branches", "type", "branches must be a non-empty list of step ids")
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        branches.append(c.name(item, f"{at}/branches/{index}", "step id"))
    attempts = 1
    if obj.get("retryPolicy") is not None:
        r = c.fields(obj["retryPolicy"], f"{at}/retryPolicy", required=("maxAttempts",), what="retryPolicy")
        if r is not None:
            attempts = c.integer(r.get("maxAttempts"), f"{at}/retryPolicy/maxAttempts", maximum=100) or 1
    return {"branches": branches, "join": c.ref(obj, at, "join"), "retryMaxAttempts": attempts}


def exits(step: Mapping[str, Any]) -> list[Exit]:
    raw = step.get("branches")
    found = [
        Exit(f"/branches/{i}", branch, "branch", "branch")
        for i, branch in enumerate(raw if isinstance(raw, list) else [])
        if target(branch)
    ]
    join = target(step.get("join"))
    if join:
        found.append(Exit("/join", join, "join", flow=False))
    return found


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> ForkStep:
    return ForkStep(
        id=s.get("id") or "",
        type="fork",
        branches=tuple(b for b in s.get("branches") or [] if b),
        join=s.get("join") or "",
        retry_max_attempts=s.get("retryMaxAttempts") or 1,
    )


STEP_TYPE = StepType(
    name="fork",
    step_class=ForkStep,
    read=read,
    required=("branches", "join"),
    optional=("retryPolicy",),
    exits=exits,
    compile=compile,
    label=pgettext_lazy("step type", "fork"),
    summary=gettext_lazy("start parallel branches"),
    shape="fork",
    form_fields=(
        FormField(
            "branches", "Branches", "steps", "The first step of each branch, separated by commas.", required=True
        ),
        FormField("join", "Join step", "step", "The join every branch leads to.", required=True),
    ),
)
