"""The compiled, immutable form of a definition document: what the engine executes.

The compiler (``compiler.py``) builds a :class:`Plan` from a validated document; the engine
reads nothing else of a definition. Every callback-like field is a :class:`Computation`:
a compiled CEL expression or a registered Python callable, evaluated with a dict of
variables (``state``, ``payload``, ``decision``, ``record``, ``results`` ...).

The step classes live with their step types in :mod:`workflows.definitions.steps`; they are
re-exported here (``plan.ForkStep``) with the pieces they are made of.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workflows.definitions.steps import (
    AgentStep,
    Assignment,
    CallStep,
    CompensationStep,
    CompleteStep,
    DecisionStep,
    Due,
    EmailStep,
    EndStep,
    FailStep,
    ForkStep,
    HumanTaskStep,
    JoinStep,
    Route,
    ScriptStep,
    ServiceStep,
    Step,
    TaskDecision,
    Timeout,
    TimerStep,
    WaitSignalStep,
)
from workflows.definitions.steps.base import Computation, Delay, apply_update


@dataclass(frozen=True)
class Contract:
    name: str
    signals: Mapping[str, Mapping[str, Any] | None]  # signal name -> payload JSON Schema (None: any)
    start_schema: Mapping[str, Any] | None


@dataclass(frozen=True)
class Trigger:
    model: str  # "app_label.Model"
    on: tuple[str, ...]  # created / updated / deleted
    when: Computation | None = None  # vars: record, previous, changed, event
    payload: Computation | None = None  # vars: record, previous, changed, event
    business_key: Computation | None = None
    # the model's field naming the user who owns a record (a relation to the user model, or
    # text holding a username): their "My requests" lists the runs about records they own
    owner_field: str | None = None


@dataclass(frozen=True)
class Plan:
    definition_id: str
    version: int
    plan_hash: str  # SHA-256 of the canonical compiled structure; the pin of every run
    contract: Contract
    state_schema: Mapping[str, Any] | None
    start_schema: Mapping[str, Any] | None
    initial_step: str
    steps: Mapping[str, Step]
    initial_state: Computation | None = None  # None: the start payload is the initial state
    subject: Computation | None = None  # gives {"type", "id", "version"?}
    trigger: Trigger | None = None
    activate_on_deploy: bool = True
    text_digest: str = ""
    # the normalised compiled structure the plan hash covers (plain JSON; for the designer)
    spec: Mapping[str, Any] = field(default_factory=dict)
    state_schema_name: str | None = None  # the catalog name, when stateSchema named one

    @property
    def signal_names(self) -> tuple[str, ...]:
        """The signals some wait of this plan accepts, sorted."""
        return tuple(sorted({s.signal for s in self.steps.values() if isinstance(s, WaitSignalStep)}))

    def step(self, step_id: str) -> Step:
        return self.steps[step_id]

    def waits_for(self, signal: str) -> bool:
        """Whether any wait of this plan accepts the signal name."""
        return any(isinstance(s, WaitSignalStep) and s.signal == signal for s in self.steps.values())


__all__ = [
    "AgentStep",
    "Assignment",
    "CallStep",
    "CompensationStep",
    "CompleteStep",
    "Computation",
    "Contract",
    "DecisionStep",
    "Delay",
    "Due",
    "EmailStep",
    "EndStep",
    "FailStep",
    "ForkStep",
    "HumanTaskStep",
    "JoinStep",
    "Plan",
    "Route",
    "ScriptStep",
    "ServiceStep",
    "Step",
    "TaskDecision",
    "Timeout",
    "TimerStep",
    "Trigger",
    "WaitSignalStep",
    "apply_update",
]
