"""The step types: one module each, one registry that everything else iterates.

:data:`REGISTRY` maps a document's step ``type`` to its :class:`StepType` (see
:mod:`.base`): validation reads a step with its reader, the compiler builds its
:class:`Step` with its compile function, graph drawing and the designer take its exits, label,
shape and form fields from it. The engine's executors (``workflows.engine.nodes``) are keyed by
the same Step classes. The order is the designer's palette order.

To add a step type, see "How to add a step type" in ``docs/development.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workflows.definitions.steps import (
    agent,
    call,
    compensation,
    complete,
    decision,
    email,
    end,
    fail,
    fork,
    human_task,
    join,
    script,
    service,
    timer,
    wait_signal,
)
from workflows.definitions.steps.agent import AgentStep
from workflows.definitions.steps.base import Exit, FormField, Step, StepType
from workflows.definitions.steps.call import CallStep
from workflows.definitions.steps.compensation import CompensationStep
from workflows.definitions.steps.complete import CompleteStep
from workflows.definitions.steps.decision import DecisionStep, Route
from workflows.definitions.steps.email import EmailStep
from workflows.definitions.steps.end import EndStep
from workflows.definitions.steps.fail import FailStep
from workflows.definitions.steps.fork import ForkStep
from workflows.definitions.steps.human_task import Assignment, Due, HumanTaskStep, TaskDecision
from workflows.definitions.steps.join import JoinStep
from workflows.definitions.steps.script import ScriptStep
from workflows.definitions.steps.service import ServiceStep
from workflows.definitions.steps.timer import TimerStep
from workflows.definitions.steps.wait_signal import Timeout, WaitSignalStep

REGISTRY: Mapping[str, StepType] = {
    module.STEP_TYPE.name: module.STEP_TYPE
    for module in (
        human_task,
        service,
        wait_signal,
        timer,
        decision,
        fork,
        join,
        compensation,
        call,
        email,
        agent,
        script,
        complete,
        fail,
        end,
    )
}


def exits(step: Mapping[str, Any]) -> list[Exit]:
    """Every place a step (normalised, or as a document spells it) names another step; none for
    a step of no known type."""
    name = step.get("type")
    found = REGISTRY.get(name) if isinstance(name, str) else None
    return found.exits(step) if found is not None else []


__all__ = [
    "REGISTRY",
    "AgentStep",
    "Assignment",
    "CallStep",
    "CompensationStep",
    "CompleteStep",
    "DecisionStep",
    "Due",
    "EmailStep",
    "EndStep",
    "Exit",
    "FailStep",
    "ForkStep",
    "FormField",
    "HumanTaskStep",
    "JoinStep",
    "Route",
    "ScriptStep",
    "ServiceStep",
    "Step",
    "StepType",
    "TaskDecision",
    "Timeout",
    "TimerStep",
    "WaitSignalStep",
    "exits",
]
