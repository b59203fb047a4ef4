"""The ``join`` step: wait for a fork's branches (all, any, or n of m) and reduce their results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    NEXT_FIELD,
    V_JOIN,
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

JOIN_POLICIES = ("all", "any", "n-of-m")


@dataclass(frozen=True)
class JoinStep(Step):
    policy: str = "all"  # "all" | "any" | "n-of-m"
    count: int | None = None  # n for n-of-m
    reducer: Computation | None = None  # vars: state, results (branch id -> branch state/result)
    on_failure: str | None = None


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    policy = obj.get("policy", "all")
    if policy not in JOIN_POLICIES:
        c.add(f"{at}/policy", "enum", "policy must be all, any or n-of-m")
        policy = "all"
    count = c.integer(obj.get("count"), f"{at}/count", maximum=1000)
    if policy == "n-of-m" and count is None and obj.get("count") is None:
        c.add(f"{at}/count", "required", "count is required for the n-of-m policy")
    if policy != "n-of-m" and obj.get("count") is not None:
        c.add(f"{at}/count", "conflict", "count applies only to the n-of-m policy")
        count = None
    if policy == "any":
        count = 1
    return {
        "policy": policy,
        "count": count,
        "set": c.value_or_callback(obj, at, cel="set", callback="reducer", category="branch_reducer", merge=True),
        "next": c.ref(obj, at, "next"),
        "onFailure": c.ref(obj, at, "onFailure"),
    }


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> JoinStep:
    return JoinStep(
        id=s.get("id") or "",
        type="join",
        next=s.get("next"),
        policy=s.get("policy") or "all",
        count=s.get("count"),
        reducer=build.computation(s.get("set"), f"{at}/{source_field(s.get('set'), 'set', 'reducer')}", V_JOIN),
        on_failure=s.get("onFailure"),
    )


STEP_TYPE = StepType(
    name="join",
    step_class=JoinStep,
    read=read,
    required=("next",),
    optional=("policy", "count", "reducer", "set", "onFailure"),
    exits=failure_exits,
    compile=compile,
    label=pgettext_lazy("step type", "join"),
    summary=gettext_lazy("wait for branches"),
    shape="join",
    form_fields=(
        FormField("policy", "Policy", "choice", choices=JOIN_POLICIES, required=True),
        FormField("count", "Count (n-of-m)", "int", "How many branches must complete for n-of-m."),
        FormField(
            "set", "Set from results (CEL)", "cel", "A map merged into the state, from state and results.", "join"
        ),
        NEXT_FIELD,
        FormField("onFailure", "On failure go to", "step"),
    ),
)
