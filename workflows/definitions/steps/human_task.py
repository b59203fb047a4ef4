"""The ``human-task`` step: a person (a user, a group, or whoever an expression names) decides.

Each decision leads to its own step and may carry a payload (its schema) and a state update;
an optional due date leads elsewhere when nobody decided in time, and reminders repeat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy, pgettext_lazy

from workflows.definitions.names import echo
from workflows.definitions.reading import Checker
from workflows.definitions.steps.base import (
    DELAYED_FIELDS,
    V_DECISION,
    V_STATE,
    Computation,
    Delay,
    Exit,
    FormField,
    Step,
    StepType,
    entries,
    next_exits,
    read_delayed_exit,
    source_field,
    target,
)

if TYPE_CHECKING:
    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract

ASSIGNMENT_MODES = ("user", "group", "role", "expression", "resolver")


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


def _assignment(value: Any, at: str, c: Checker) -> dict[str, Any] | None:
    obj = c.fields(value, at, required=("mode", "value"), what="assignment")
    if obj is None:
        return None
    mode = obj.get("mode")
    if mode is not None and mode not in ASSIGNMENT_MODES:
        c.add(f"{at}/mode", "enum", "mode must be user, group, role, expression or resolver")
        return None
    raw = obj.get("value")
    if mode == "expression":
        return {"mode": "expression", "value": c.expression(raw, f"{at}/value")}
    if mode == "resolver":
        return {"mode": "expression", "value": c.callback(raw, f"{at}/value", "assignment_resolver")}
    value = c.string(raw, f"{at}/value", max_length=255)
    if value is not None and not value.strip():
        c.add(f"{at}/value", "required", "assignment value must not be blank")
    return {"mode": "group" if mode == "role" else mode, "value": value}


def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    decisions: list[dict[str, Any]] = []
    raw = obj.get("decisions")
    if raw is not None and (not isinstance(raw, list) or not raw):
        c.add(f"{at}/decisions", "type", "decisions must be a non-empty list")
    seen: set[str] = set()
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        here = f"{at}/decisions/{index}"
        d = c.fields(
            item,
            here,
            required=("name", "next"),
            optional=("label", "payloadSchema", "applicator", "set"),
            aliases={"payloadType": "payloadSchema"},
            what="decision",
        )
        if d is None:
            continue
        name = c.name(d.get("name"), f"{here}/name", "decision name")
        if name is not None:
            if name in seen:
                c.add(f"{here}/name", "unique", f"decision{echo(name)} is declared twice")
            seen.add(name)
        decisions.append(
            {
                "name": name,
                "label": c.string(d.get("label"), f"{here}/label", max_length=255),
                "payloadSchema": c.schema(d.get("payloadSchema"), f"{here}/payloadSchema"),
                "set": c.value_or_callback(
                    d, here, cel="set", callback="applicator", category="state_reducer", merge=True
                ),
                "next": c.ref(d, here, "next"),
            }
        )
    due = None
    if obj.get("due") is not None:
        d = c.fields(
            obj["due"],
            f"{at}/due",
            required=("next",),
            optional=DELAYED_FIELDS,
            what="due",
        )
        if d is not None:
            due = read_delayed_exit(d, f"{at}/due", c)
    # The plan rule "reminders need an event recorder" holds for every plan here, so nothing is
    # refused for it. The reference refuses a plan with task reminders when no WORKFLOW_EVENT
    # side-effect recorder is installed, because that intent kind is optional there and a
    # reminder's event would have nowhere to go. Here a reminder's event is a task notice: the
    # segment that fires the REMINDER timer writes TASK_REMINDER_FIRED and a NOTIFY intent to
    # the engine's own outbox in the same transaction, and the outbox delivers it (as mail to
    # the assignees; a notice nobody can receive is recorded as delivered at once). No setting
    # and no catalog removes that recorder, so every deployment has one. Checked here: the
    # shape of `reminders` and a positive `every`.
    reminders = None
    if obj.get("reminders") is not None:
        r = c.fields(obj["reminders"], f"{at}/reminders", required=("every",), what="reminders")
        if r is not None:
            reminders = c.duration(r.get("every"), f"{at}/reminders/every")
    stable = c.boolean(obj.get("requireVersionStability"), f"{at}/requireVersionStability")
    return {
        "taskType": c.name(obj.get("taskType"), f"{at}/taskType", "task type") or "approval",
        "title": c.template(obj.get("title"), f"{at}/title") or "",
        "description": c.template(obj.get("description"), f"{at}/description") or "",
        "assignment": _assignment(obj.get("assignment"), f"{at}/assignment", c)
        if obj.get("assignment") is not None
        else None,
        "decisions": decisions,
        "due": due,
        "remindEverySeconds": reminders,
        "requireVersionStability": bool(stable),
    }


def exits(step: Mapping[str, Any]) -> list[Exit]:
    found = next_exits(step)
    for i, decision in entries(step.get("decisions")):
        leads_to = target(decision.get("next"))
        if leads_to:
            label = decision.get("label") or decision.get("name") or ""
            found.append(Exit(f"/decisions/{i}/next", leads_to, "decision", str(label)))
    due = step.get("due")
    when_due = target(due.get("next")) if isinstance(due, Mapping) else None
    if when_due:
        found.append(Exit("/due/next", when_due, "due", "due"))
    return found


def schemas(step: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any] | None]]:
    return [(f"/decisions/{i}/payloadSchema", d.get("payloadSchema")) for i, d in entries(step.get("decisions"))]


def compile(build: Build, s: Mapping[str, Any], at: str, contract: Contract | None) -> HumanTaskStep:
    a = s.get("assignment") or {}
    mode = a.get("mode") or "group"
    if mode == "expression":
        value = a.get("value") or {}
        assignment = Assignment(
            mode="expression", expression=build.computation(value, f"{at}/assignment/value", V_STATE)
        )
    else:
        assignment = Assignment(mode=mode, value=a.get("value"))
    decisions = []
    for index, d in enumerate(s.get("decisions") or []):
        here = f"{at}/decisions/{index}"
        decisions.append(
            TaskDecision(
                name=d.get("name") or "",
                next=d.get("next") or "",
                payload_schema=build.schema(d.get("payloadSchema"), f"{here}/payloadSchema"),
                set=build.computation(
                    d.get("set"), f"{here}/{source_field(d.get('set'), 'set', 'applicator')}", V_DECISION
                ),
                label=d.get("label"),
            )
        )
    due = None
    if s.get("due"):
        d = s["due"]
        due = Due(
            delay=build.delay(d.get("delay"), f"{at}/due"),
            next=d.get("next") or "",
            set=build.computation(d.get("set"), f"{at}/due/{source_field(d.get('set'), 'set', 'mutator')}", V_STATE),
        )
    return HumanTaskStep(
        id=s.get("id") or "",
        type="human-task",
        task_type=s.get("taskType") or "approval",
        title=s.get("title") or "",
        description=s.get("description") or "",
        assignment=assignment,
        decisions=tuple(decisions),
        due=due,
        reminder_every_seconds=s.get("remindEverySeconds"),
        require_version_stability=bool(s.get("requireVersionStability")),
        title_template=build.template(s.get("title"), f"{at}/title"),
        description_template=build.template(s.get("description"), f"{at}/description"),
    )


STEP_TYPE = StepType(
    name="human-task",
    step_class=HumanTaskStep,
    read=read,
    required=("assignment", "decisions"),
    optional=("taskType", "title", "description", "due", "reminders", "requireVersionStability"),
    exits=exits,
    compile=compile,
    schemas=schemas,
    label=pgettext_lazy("step type", "human task"),
    summary=gettext_lazy("a person decides"),
    shape="banded",
    form_fields=(
        FormField("title", "Title", "template", "Shown to the assignee; {{ state.x }} placeholders allowed.", "state"),
        FormField("description", "Description", "longtemplate", "{{ state.x }} placeholders allowed.", "state"),
        FormField("taskType", "Task type", help="A free label, for example approval."),
        FormField("assignment/mode", "Assign to", "choice", choices=("group", "user", "expression"), required=True),
        FormField(
            "assignment/value",
            "Assignee",
            help='A group name, a user name, or for \'expression\' CEL over state giving "group:x" or "user:y".',
            required=True,
        ),
        FormField("due/after", "Due after", "duration", "ISO-8601 duration, for example P3D."),
        FormField("due/next", "When due go to", "step"),
        FormField("reminders/every", "Remind every", "duration", "ISO-8601 duration, for example P1D."),
        FormField("requireVersionStability", "Refuse decisions on a changed subject", "bool"),
    ),
    form_rows=(
        "decisions",
        (
            FormField("name", "Name"),
            FormField("label", "Label"),
            FormField("next", "Next step", "step"),
            FormField("set", "Set (CEL)", "cel", variables="decision"),
        ),
    ),
)
