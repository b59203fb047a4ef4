"""The compiled, immutable form of a definition document: what the engine executes.

The compiler (``compiler.py``) builds a :class:`Plan` from a validated document; the engine
reads nothing else of a definition. Every callback-like field is a :class:`Computation`:
a compiled CEL expression or a registered Python callable, evaluated with a dict of
variables (``state``, ``payload``, ``decision``, ``record``, ``results`` ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Computation(Protocol):
    """A value computed from variables: CEL (``kind == "cel"``) or a named callback.

    The implementations (``expressions.CelComputation``, ``expressions.Template`` with
    ``kind == "template"``, ``catalogs.CallbackComputation``) also carry ``merge``: true for a
    CEL ``set:`` whose map result is merged key by key into the state, false for a callback
    reducer/mutator that returns the whole new state. Use :func:`apply_update` for state
    updates. CEL results are plain JSON-like Python values (timestamps as RFC 3339 text,
    durations as seconds); a failed evaluation raises ``exceptions.ExpressionFailed``.
    """

    kind: str  # "cel" | "callback" | "template"
    source: str  # the expression text or the callback name (for diagnostics, never values)

    def evaluate(self, variables: Mapping[str, Any]) -> Any: ...


def apply_update(computation: Computation | None, state: Any, variables: Mapping[str, Any]) -> Any:
    """The state after a ``set`` / reducer / mutator: a CEL map is merged key by key into the
    state (a shallow merge; a key set to null stays null), a callback's result replaces it.
    ``variables`` should include ``state``; ``None`` leaves the state unchanged."""
    if computation is None:
        return state
    result = computation.evaluate(variables)
    if getattr(computation, "merge", False):
        if not isinstance(result, Mapping):
            from workflows.exceptions import ExpressionFailed

            raise ExpressionFailed("a set expression must give a map")
        merged = dict(state) if isinstance(state, Mapping) else {}
        merged.update(result)
        return merged
    return result


@dataclass(frozen=True)
class Contract:
    name: str
    signals: Mapping[str, Mapping[str, Any] | None]  # signal name -> payload JSON Schema (None: any)
    start_schema: Mapping[str, Any] | None


@dataclass(frozen=True)
class Delay:
    """``after`` (ISO-8601 duration, seconds) or ``at`` (a computation giving an instant).

    ``at`` gives RFC 3339 text (CEL ``timestamp(...)`` comes back as ``...Z`` text), an aware
    ``datetime`` (a timer-resolver callback may return one) or a number of seconds from now.
    """

    seconds: float | None = None
    at: Computation | None = None


@dataclass(frozen=True)
class Timeout:
    delay: Delay
    next: str
    set: Computation | None = None  # state mutator / CEL map merged into state


@dataclass(frozen=True)
class Step:
    id: str
    type: str
    next: str | None = None


@dataclass(frozen=True)
class ServiceStep(Step):
    target: str = ""  # registered handler name or an https:// webhook URL
    payload: Computation | None = None  # payloadMapper / CEL
    set: Computation | None = None  # result -> state (vars: state, result)
    compensation: str | None = None


@dataclass(frozen=True)
class WaitSignalStep(Step):
    signal: str = ""
    payload_schema: Mapping[str, Any] | None = None
    set: Computation | None = None  # stateReducer / CEL (vars: state, payload)
    timeout: Timeout | None = None


@dataclass(frozen=True)
class TimerStep(Step):
    delay: Delay = field(default_factory=Delay)
    set: Computation | None = None


@dataclass(frozen=True)
class Assignment:
    mode: str  # "user" | "group" | "expression"
    value: str | None = None  # username or group name
    expression: Computation | None = None  # gives {"mode", "value"} or a "user:x"/"group:y" string


@dataclass(frozen=True)
class TaskDecision:
    name: str
    next: str
    payload_schema: Mapping[str, Any] | None = None
    set: Computation | None = None  # applicator / CEL (vars: state, payload, decision)
    label: str | None = None


@dataclass(frozen=True)
class Due:
    delay: Delay
    next: str
    set: Computation | None = None


@dataclass(frozen=True)
class HumanTaskStep(Step):
    task_type: str = "approval"
    title: str = ""  # template with {{ state.x }} placeholders
    description: str = ""
    assignment: Assignment = field(default_factory=lambda: Assignment(mode="group", value=""))
    decisions: tuple[TaskDecision, ...] = ()
    due: Due | None = None
    reminder_every_seconds: float | None = None
    require_version_stability: bool = False
    title_template: Computation | None = None  # renders ``title`` (vars: state) -> str
    description_template: Computation | None = None


@dataclass(frozen=True)
class Route:
    to: str
    when: Computation | None = None  # CEL boolean
    condition: str | None = None  # named condition callback
    uses: tuple[str, ...] = ()  # the named conditions ``when`` reads (``conditions['id']``)


@dataclass(frozen=True)
class DecisionStep(Step):
    routes: tuple[Route, ...] = ()
    default: str = ""
    # named conditions the routes use: name -> callback computation (vars: state); evaluate
    # each once per decision evaluation
    conditions: Mapping[str, Computation] = field(default_factory=dict)


@dataclass(frozen=True)
class ForkStep(Step):
    branches: tuple[str, ...] = ()  # first step id of each branch
    join: str = ""
    retry_max_attempts: int = 0


@dataclass(frozen=True)
class JoinStep(Step):
    policy: str = "all"  # "all" | "any" | "n-of-m"
    count: int | None = None  # n for n-of-m
    reducer: Computation | None = None  # vars: state, results (branch id -> branch state/result)
    on_failure: str | None = None


@dataclass(frozen=True)
class CompensationStep(Step):
    forward_step: str = ""
    target: str = ""
    payload: Computation | None = None


@dataclass(frozen=True)
class CallStep(Step):
    definition_id: str = ""
    version: int | None = None
    payload: Computation | None = None  # vars: state
    set: Computation | None = None  # vars: state, result (child's state), status
    on_failure: str | None = None


@dataclass(frozen=True)
class EmailStep(Step):
    to: Computation | None = None  # list of addresses or a single address
    subject: str = ""  # template
    body: str = ""  # template
    subject_template: Computation | None = None  # renders ``subject`` (vars: state) -> str
    body_template: Computation | None = None


@dataclass(frozen=True)
class AgentStep(Step):
    agent: str = ""  # registered callable
    input: Computation | None = None
    set: Computation | None = None  # vars: state, result
    call: Computation | None = None  # the registered agent (vars: input, state) -> result


@dataclass(frozen=True)
class ScriptStep(Step):
    script: str = ""  # registered callable
    input: Computation | None = None
    set: Computation | None = None
    call: Computation | None = None  # the registered script (vars: input, state) -> result


@dataclass(frozen=True)
class CompleteStep(Step):
    pass


@dataclass(frozen=True)
class FailStep(Step):
    error_type: str = "failed"
    message: Computation | None = None


@dataclass(frozen=True)
class EndStep(Step):
    """Terminate: the run ends here (COMPLETED) and everything open is torn down."""

    reason: str | None = None


@dataclass(frozen=True)
class Trigger:
    model: str  # "app_label.Model"
    on: tuple[str, ...]  # created / updated / deleted
    when: Computation | None = None  # vars: record, previous, changed, event
    payload: Computation | None = None  # vars: record, previous, changed, event
    business_key: Computation | None = None


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
