"""The ``wait-signal`` step: park until a signal the contract declares arrives (or a timeout)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.names import echo
from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    DELAYED_FIELDS,
    NEXT_FIELD,
    V_SIGNAL,
    V_STATE,
    Computation,
    Delay,
    Exit,
    FormField,
    Step,
    StepType,
    next_exits,
    read_delayed_exit,
    source_field,
    target,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


@dataclass(frozen=True)
class Timeout:
    delay: Delay
    next: str
    set: Computation | None = None  # state mutator / CEL map merged into state


@dataclass(frozen=True)
class WaitSignalStep(Step):
    signal: str = ""
    payload_schema: Mapping[str, Any] | None = None
    set: Computation | None = None  # stateReducer / CEL (vars: state, payload)
    timeout: Timeout | None = None


def _timeout(value: Any, at: str, c: Checker) -> dict[str, Any] | None:
    if value is None:
        return None
    obj = c.fields(
        value, at, required=("next",), optional=DELAYED_FIELDS, aliases={"onTimeoutMutator": "mutator"}, what="timeout"
    )
    return None if obj is None else read_delayed_exit(obj, at, c)


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "signal": c.name(obj.get("signal"), f"{at}/signal", "signal name"),
        "payloadSchema": c.schema(obj.get("payloadSchema"), f"{at}/payloadSchema"),
        "set": c.value_or_callback(obj, at, cel="set", callback="stateReducer", category="state_reducer", merge=True),
        "timeout": _timeout(obj.get("timeout"), f"{at}/timeout", c),
        "next": c.ref(obj, at, "next"),
    }


def exits(step: Mapping[str, Any]) -> list[Exit]:
    found = next_exits(step)
    timeout = step.get("timeout")
    on_timeout = target(timeout.get("next")) if isinstance(timeout, Mapping) else None
    if on_timeout:
        found.append(Exit("/timeout/next", on_timeout, "timeout", "timeout"))
    return found


def schemas(step: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any] | None]]:
    return [("/payloadSchema", step.get("payloadSchema"))]


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> WaitSignalStep:
    signal = s.get("signal") or ""
    payload_schema = build.schema(s.get("payloadSchema"), f"{at}/payloadSchema")
    if contract is not None and signal and signal not in contract.signals:
        build.add(f"{at}/signal", "undeclaredSignal", f"the contract does not declare the signal{echo(signal)}")
    if payload_schema is None and contract is not None and signal in contract.signals:
        payload_schema = contract.signals[signal]
    timeout = None
    if s.get("timeout"):
        t = s["timeout"]
        timeout = Timeout(
            delay=build.delay(t.get("delay"), f"{at}/timeout"),
            next=t.get("next") or "",
            set=build.computation(
                t.get("set"), f"{at}/timeout/{source_field(t.get('set'), 'set', 'mutator')}", V_STATE
            ),
        )
    return WaitSignalStep(
        id=s.get("id") or "",
        type="wait-signal",
        next=s.get("next"),
        signal=signal,
        payload_schema=payload_schema,
        set=build.computation(s.get("set"), f"{at}/{source_field(s.get('set'), 'set', 'stateReducer')}", V_SIGNAL),
        timeout=timeout,
    )


STEP_TYPE = StepType(
    name="wait-signal",
    step_class=WaitSignalStep,
    read=read,
    required=("signal", "next"),
    optional=("payloadSchema", "stateReducer", "set", "timeout"),
    aliases={"payloadType": "payloadSchema"},
    exits=exits,
    compile=compile,
    schemas=schemas,
    label=pgettext_lazy("step type", "signal wait"),
    summary=gettext_lazy("wait for a signal"),
    shape="hexagon",
    form_fields=(
        FormField("signal", "Signal", help="A signal the contract declares.", required=True),
        FormField(
            "set", "Set from signal (CEL)", "cel", "A map merged into the state, from state and payload.", "signal"
        ),
        NEXT_FIELD,
        FormField("timeout/after", "Timeout after", "duration", "ISO-8601 duration, for example PT15M or P2D."),
        FormField("timeout/next", "On timeout go to", "step"),
    ),
)
