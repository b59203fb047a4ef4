"""Shape and graph rules of a definition document: catalog-free, value-free, everything at once.

:func:`normalise` checks the document's shape strictly (unknown fields, missing required
fields, wrong types, mutually exclusive forms, the reference's Java-style aliases such as
``stateType`` / ``payloadType``) and answers the **normalised spec**: plain JSON with one
spelling per field, defaults filled in and durations in seconds. The spec is what the plan hash
covers, so key order, comments, aliases and spelled-out defaults never change the hash.

:func:`graph_violations` checks the step graph: unique ids, every reference resolves, every
step reachable from ``initialStep``, forks and joins pair up, n-of-m counts fit.

Names resolved through catalogs (contracts, schemas, callbacks), CEL compilation and the plan
rules that need the contract live in :mod:`workflows.definitions.compiler`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from workflows.definitions.names import echo, is_safe
from workflows.exceptions import Violation

STEP_TYPES = (
    "service",
    "wait-signal",
    "timer",
    "human-task",
    "decision",
    "fork",
    "join",
    "compensation",
    "call",
    "email",
    "agent",
    "script",
    "complete",
    "fail",
    "end",
)
TERMINAL_TYPES = ("complete", "fail", "end")
TRIGGER_EVENTS = ("created", "updated", "deleted")
ASSIGNMENT_MODES = ("user", "group", "role", "expression", "resolver")
JOIN_POLICIES = ("all", "any", "n-of-m")
MAX_VERSION = 2_147_483_647
MAX_TEXT = 4000

_DURATION = re.compile(
    r"^P(?!$)(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?$"
)


def parse_duration(text: Any) -> float | None:
    """Seconds of an ISO-8601 duration (``P3D``, ``PT15M``, ``P1W``, ``PT0.5S``), or None.

    Years and months have no fixed length and are refused.
    """
    if not isinstance(text, str):
        return None
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    parts = {k: float(v.replace(",", ".")) if v else 0.0 for k, v in match.groupdict().items()}
    seconds = (parts["weeks"] * 604800 + parts["days"] * 86400 + parts["hours"] * 3600 + parts["minutes"] * 60) + parts[
        "seconds"
    ]
    return int(seconds) if seconds == int(seconds) else seconds


@dataclass
class Checker:
    """Collects violations while reading one document; pointers are RFC 6901."""

    violations: list[Violation] = field(default_factory=list)

    def add(self, at: str, kind: str, message: str) -> None:
        self.violations.append(Violation(at, kind, message))

    # --- objects -----------------------------------------------------------------------------

    def fields(
        self,
        data: Any,
        at: str,
        *,
        required: Iterable[str] = (),
        optional: Iterable[str] = (),
        aliases: dict[str, str] | None = None,
        what: str = "object",
    ) -> dict[str, Any] | None:
        """The object with aliases renamed; unknown and missing fields reported."""
        if not isinstance(data, dict):
            self.add(at, "type", f"{what} must be a mapping")
            return None
        aliases = aliases or {}
        known = set(required) | set(optional)
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = aliases.get(key, key)
            here = f"{at}/{_escape(key)}" if is_safe(key) else at  # never repeat an unsafe key
            if name not in known:
                self.add(here, "unknown", f"unknown field{echo(key)}")
                continue
            if name in out:
                self.add(here, "conflict", f"field{echo(key)} repeats{echo(name)} under another spelling")
                continue
            out[name] = value
        for name in required:
            if name not in out or out[name] is None:
                self.add(f"{at}/{name}", "required", f"field '{name}' is required")
        return out

    def exclusive(self, obj: dict[str, Any], at: str, *names: str, required: bool = False) -> str | None:
        """At most one (or, with ``required``, exactly one) of ``names``; answers which."""
        present = [n for n in names if obj.get(n) is not None]
        if len(present) > 1:
            self.add(f"{at}/{present[1]}", "conflict", f"use only one of {', '.join(names)}")
        if required and not present:
            self.add(at, "required", f"one of {', '.join(names)} is required")
        return present[0] if present else None

    # --- scalars -----------------------------------------------------------------------------

    def string(self, value: Any, at: str, *, max_length: int = MAX_TEXT) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            self.add(at, "type", "must be text")
            return None
        if len(value) > max_length:
            self.add(at, "maxLength", f"must be at most {max_length} characters")
            return None
        return value

    def name(self, value: Any, at: str, what: str = "name") -> str | None:
        """A plain identifier: ``^[A-Za-z0-9_.$-]{1,255}$``."""
        if value is None:
            return None
        if not is_safe(value):
            self.add(at, "pattern", f"{what} must be 1-255 letters, digits, '_', '.', '$' or '-'")
            return None
        return str(value)

    def integer(self, value: Any, at: str, *, minimum: int = 1, maximum: int = MAX_VERSION) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(at, "type", "must be an integer")
            return None
        if value < minimum or value > maximum:
            self.add(at, "range", f"must be between {minimum} and {maximum}")
            return None
        return value

    def boolean(self, value: Any, at: str) -> bool | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            self.add(at, "type", "must be true or false")
            return None
        return value

    def duration(self, value: Any, at: str) -> float | None:
        if value is None:
            return None
        seconds = parse_duration(value)
        if seconds is None:
            self.add(at, "duration", "must be an ISO-8601 duration such as PT15M, P3D or P1W (no years or months)")
            return None
        if seconds <= 0:
            self.add(at, "duration", "must be longer than zero")
            return None
        return seconds

    def expression(self, value: Any, at: str) -> dict[str, Any] | None:
        text = self.string(value, at)
        if text is None:
            return None
        if not text.strip():
            self.add(at, "expression", "expression must not be empty")
            return None
        return {"cel": text}

    def template(self, value: Any, at: str) -> str | None:
        return self.string(value, at)

    def callback(self, value: Any, at: str, category: str) -> dict[str, Any] | None:
        name = self.name(value, at, "callback name")
        return {"callback": name, "category": category} if name else None

    def schema(self, value: Any, at: str) -> dict[str, Any] | None:
        """A type name (``{"type": name}``) or an inline schema (``{"inline": schema}``)."""
        if value is None:
            return None
        if isinstance(value, str):
            name = self.name(value, at, "type name")
            return {"type": name} if name else None
        if isinstance(value, dict | bool):
            return {"inline": value}
        self.add(at, "type", "must be a type name or an inline JSON Schema")
        return None

    def value_or_callback(
        self, obj: dict[str, Any], at: str, *, cel: str, callback: str | None, category: str | None, merge: bool = False
    ) -> dict[str, Any] | None:
        """A CEL field or its callback alternative (exclusive)."""
        names = (cel, callback) if callback else (cel,)
        chosen = self.exclusive(obj, at, *names)
        if chosen is None:
            return None
        if chosen == cel:
            found = self.expression(obj[cel], f"{at}/{cel}")
            if found is not None and merge:
                found["merge"] = True
            return found
        assert category is not None
        return self.callback(obj[chosen], f"{at}/{chosen}", category)


def _escape(token: str) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


# --- the document ----------------------------------------------------------------------------

TOP_REQUIRED = ("definitionId", "definitionVersion", "contract", "initialStep", "steps")
TOP_OPTIONAL = (
    "stateSchema",
    "startPayloadSchema",
    "initialStateMapper",
    "initialState",
    "subjectResolver",
    "subject",
    "trigger",
    "activateOnDeploy",
    "description",
)
TOP_ALIASES = {"stateType": "stateSchema", "startPayloadType": "startPayloadSchema"}


def normalise(data: dict[str, Any], checker: Checker) -> dict[str, Any]:
    """The normalised spec of a document (see the module docstring)."""
    top = checker.fields(data, "", required=TOP_REQUIRED, optional=TOP_OPTIONAL, aliases=TOP_ALIASES, what="document")
    if top is None:
        return {}
    spec: dict[str, Any] = {
        "definitionId": checker.name(top.get("definitionId"), "/definitionId", "definitionId"),
        "definitionVersion": checker.integer(top.get("definitionVersion"), "/definitionVersion"),
        "contract": _contract(top.get("contract"), checker),
        "stateSchema": checker.schema(top.get("stateSchema"), "/stateSchema"),
        "startPayloadSchema": checker.schema(top.get("startPayloadSchema"), "/startPayloadSchema"),
        "initialState": checker.value_or_callback(
            top, "", cel="initialState", callback="initialStateMapper", category="initial_state"
        ),
        "subject": checker.value_or_callback(
            top, "", cel="subject", callback="subjectResolver", category="subject_resolver"
        ),
        "trigger": _trigger(top.get("trigger"), checker),
        "initialStep": checker.name(top.get("initialStep"), "/initialStep", "step id"),
        "steps": [],
    }
    if top.get("description") is not None:
        checker.string(top["description"], "/description")
    activate = checker.boolean(top.get("activateOnDeploy"), "/activateOnDeploy")
    spec["_activateOnDeploy"] = True if activate is None else activate
    steps = top.get("steps")
    if steps is not None:
        if not isinstance(steps, list) or not steps:
            checker.add("/steps", "type", "steps must be a non-empty list")
        else:
            spec["steps"] = [_step(step, f"/steps/{index}", checker) for index, step in enumerate(steps)]
    return spec


def _contract(value: Any, checker: Checker) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        name = checker.name(value, "/contract", "contract name")
        return {"name": name} if name else None
    obj = checker.fields(value, "/contract", required=("name",), optional=("signals", "startSchema"), what="contract")
    if obj is None:
        return None
    name = checker.name(obj.get("name"), "/contract/name", "contract name")
    signals: dict[str, Any] = {}
    raw = obj.get("signals")
    if raw is not None and not isinstance(raw, dict):
        checker.add("/contract/signals", "type", "signals must be a mapping of signal name to schema")
    for signal, schema in (raw or {}).items() if isinstance(raw, dict) else ():
        here = f"/contract/signals/{_escape(signal)}"
        if checker.name(signal, here, "signal name") is not None:
            signals[signal] = checker.schema(schema, here)
    return {
        "name": name,
        "inline": True,
        "signals": signals,
        "startSchema": checker.schema(obj.get("startSchema"), "/contract/startSchema"),
    }


def _trigger(value: Any, checker: Checker) -> dict[str, Any] | None:
    if value is None:
        return None
    obj = checker.fields(
        value, "/trigger", required=("model", "on"), optional=("when", "payload", "businessKey"), what="trigger"
    )
    if obj is None:
        return None
    model = checker.string(obj.get("model"), "/trigger/model", max_length=255)
    if model is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*", model):
        checker.add("/trigger/model", "pattern", "model must be app_label.ModelName")
        model = None
    events = obj.get("on")
    on: list[str] = []
    if events is not None:
        if isinstance(events, str):
            events = [events]
        if not isinstance(events, list) or not events:
            checker.add("/trigger/on", "type", "on must be a non-empty list of created, updated, deleted")
        else:
            for index, event in enumerate(events):
                if event not in TRIGGER_EVENTS:
                    checker.add(f"/trigger/on/{index}", "enum", "must be created, updated or deleted")
                elif event not in on:
                    on.append(event)
    return {
        "model": model,
        "on": sorted(on, key=TRIGGER_EVENTS.index),
        "when": checker.expression(obj.get("when"), "/trigger/when"),
        "payload": checker.expression(obj.get("payload"), "/trigger/payload"),
        "businessKey": checker.expression(obj.get("businessKey"), "/trigger/businessKey"),
    }


# --- steps -----------------------------------------------------------------------------------

StepReader = Callable[[dict[str, Any], str, Checker], dict[str, Any]]


def _step(value: Any, at: str, checker: Checker) -> dict[str, Any]:
    if not isinstance(value, dict):
        checker.add(at, "type", "a step must be a mapping")
        return {}
    step_type = value.get("type")
    if step_type not in STEP_TYPES:
        if step_type is None:
            checker.add(f"{at}/type", "required", "field 'type' is required")
        else:
            checker.add(f"{at}/type", "enum", f"unknown step type{echo(step_type)}")
        checker.name(value.get("id"), f"{at}/id", "step id")
        return {"id": value.get("id") if is_safe(value.get("id")) else None, "type": None}
    reader, required, optional, aliases = _READERS[step_type]
    obj = checker.fields(
        value,
        at,
        required=("id", "type", *required),
        optional=optional,
        aliases=aliases,
        what=f"{step_type} step",
    )
    assert obj is not None
    out = {"id": checker.name(obj.get("id"), f"{at}/id", "step id"), "type": step_type}
    out.update(reader(obj, at, checker))
    return out


def _ref(checker: Checker, obj: dict[str, Any], at: str, key: str) -> str | None:
    return checker.name(obj.get(key), f"{at}/{key}", "step id")


def _service(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    target = c.string(obj.get("target"), f"{at}/target", max_length=2048)
    return {
        "target": target,
        "payload": c.value_or_callback(obj, at, cel="payload", callback="payloadMapper", category="payload_mapper"),
        "set": c.value_or_callback(obj, at, cel="set", callback=None, category=None, merge=True),
        "next": _ref(c, obj, at, "next"),
        "compensation": _ref(c, obj, at, "compensation"),
    }


def _delay(obj: dict[str, Any], at: str, c: Checker, *, required: bool = True) -> dict[str, Any]:
    chosen = c.exclusive(obj, at, "after", "at", "fireAt", required=required)
    if chosen == "after":
        return {"after": c.duration(obj["after"], f"{at}/after")}
    if chosen == "at":
        return {"at": c.expression(obj["at"], f"{at}/at")}
    if chosen == "fireAt":
        return {"at": c.callback(obj["fireAt"], f"{at}/fireAt", "timer_resolver")}
    return {}


def _mutation(obj: dict[str, Any], at: str, c: Checker, callback: str = "mutator") -> dict[str, Any] | None:
    return c.value_or_callback(obj, at, cel="set", callback=callback, category="state_mutator", merge=True)


def _timeout(value: Any, at: str, c: Checker) -> dict[str, Any] | None:
    if value is None:
        return None
    obj = c.fields(
        value,
        at,
        required=("next",),
        optional=("after", "at", "fireAt", "set", "mutator"),
        aliases={"onTimeoutMutator": "mutator"},
        what="timeout",
    )
    if obj is None:
        return None
    return {"delay": _delay(obj, at, c), "set": _mutation(obj, at, c), "next": _ref(c, obj, at, "next")}


def _wait_signal(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "signal": c.name(obj.get("signal"), f"{at}/signal", "signal name"),
        "payloadSchema": c.schema(obj.get("payloadSchema"), f"{at}/payloadSchema"),
        "set": c.value_or_callback(obj, at, cel="set", callback="stateReducer", category="state_reducer", merge=True),
        "timeout": _timeout(obj.get("timeout"), f"{at}/timeout", c),
        "next": _ref(c, obj, at, "next"),
    }


def _timer(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {"delay": _delay(obj, at, c), "set": _mutation(obj, at, c), "next": _ref(c, obj, at, "next")}


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


def _human_task(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
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
                "next": _ref(c, d, here, "next"),
            }
        )
    due = None
    if obj.get("due") is not None:
        d = c.fields(
            obj["due"],
            f"{at}/due",
            required=("next",),
            optional=("after", "at", "fireAt", "set", "mutator"),
            what="due",
        )
        if d is not None:
            due = {
                "delay": _delay(d, f"{at}/due", c),
                "set": _mutation(d, f"{at}/due", c),
                "next": _ref(c, d, f"{at}/due", "next"),
            }
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


def _decision(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    routes: list[dict[str, Any]] = []
    raw = obj.get("routes")
    if raw is not None and (not isinstance(raw, list) or not raw):
        c.add(f"{at}/routes", "type", "routes must be a non-empty list")
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        here = f"{at}/routes/{index}"
        r = c.fields(item, here, required=("to",), optional=("when", "condition"), what="route")
        if r is None:
            continue
        chosen = c.exclusive(r, here, "when", "condition", required=True)
        route: dict[str, Any] = {"to": _ref(c, r, here, "to")}
        if chosen == "when":
            route["when"] = c.expression(r["when"], f"{here}/when")
        elif chosen == "condition":
            route["condition"] = c.callback(r["condition"], f"{here}/condition", "condition")
        routes.append(route)
    return {"routes": routes, "default": _ref(c, obj, at, "default")}


def _fork(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
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
    return {"branches": branches, "join": _ref(c, obj, at, "join"), "retryMaxAttempts": attempts}


def _join(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
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
        "next": _ref(c, obj, at, "next"),
        "onFailure": _ref(c, obj, at, "onFailure"),
    }


def _compensation(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "forwardStep": _ref(c, obj, at, "forwardStep"),
        "target": c.string(obj.get("target"), f"{at}/target", max_length=2048),
        "payload": c.value_or_callback(obj, at, cel="payload", callback="payloadMapper", category="payload_mapper"),
    }


def _call(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "definitionId": c.name(obj.get("definitionId"), f"{at}/definitionId", "definitionId"),
        "version": c.integer(obj.get("version"), f"{at}/version"),
        "payload": c.value_or_callback(obj, at, cel="payload", callback="payloadMapper", category="payload_mapper"),
        "set": c.value_or_callback(obj, at, cel="set", callback=None, category=None, merge=True),
        "next": _ref(c, obj, at, "next"),
        "onFailure": _ref(c, obj, at, "onFailure"),
    }


def _email(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {
        "to": c.expression(obj.get("to"), f"{at}/to"),
        "subject": c.template(obj.get("subject"), f"{at}/subject") or "",
        "body": c.template(obj.get("body"), f"{at}/body") or "",
        "next": _ref(c, obj, at, "next"),
    }


def _callable_step(key: str, category: str) -> StepReader:
    def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
        return {
            key: c.callback(obj.get(key), f"{at}/{key}", category),
            "input": c.expression(obj.get("input"), f"{at}/input"),
            "set": c.value_or_callback(obj, at, cel="set", callback=None, category=None, merge=True),
            "next": _ref(c, obj, at, "next"),
        }

    return read


def _complete(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {}


def _fail(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    chosen = c.exclusive(obj, at, "message", "messageFactory")
    message: dict[str, Any] | None = None
    if chosen == "message":
        text = c.template(obj["message"], f"{at}/message")
        message = {"template": text} if text is not None else None
    elif chosen == "messageFactory":
        message = c.callback(obj["messageFactory"], f"{at}/messageFactory", "fail_message")
    return {
        "errorType": c.name(obj.get("errorType"), f"{at}/errorType", "errorType") or "failed",
        "message": message,
    }


def _end(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    return {"reason": c.string(obj.get("reason"), f"{at}/reason", max_length=255)}


_READERS: dict[str, tuple[StepReader, tuple[str, ...], tuple[str, ...], dict[str, str]]] = {
    "service": (_service, ("target", "next"), ("payloadMapper", "payload", "set", "compensation"), {}),
    "wait-signal": (
        _wait_signal,
        ("signal", "next"),
        ("payloadSchema", "stateReducer", "set", "timeout"),
        {"payloadType": "payloadSchema"},
    ),
    "timer": (_timer, ("next",), ("after", "at", "fireAt", "set", "mutator"), {}),
    "human-task": (
        _human_task,
        ("assignment", "decisions"),
        ("taskType", "title", "description", "due", "reminders", "requireVersionStability"),
        {},
    ),
    "decision": (_decision, ("routes", "default"), (), {}),
    "fork": (_fork, ("branches", "join"), ("retryPolicy",), {}),
    "join": (_join, ("next",), ("policy", "count", "reducer", "set", "onFailure"), {}),
    "compensation": (_compensation, ("forwardStep", "target"), ("payloadMapper", "payload"), {}),
    "call": (_call, ("definitionId", "next"), ("version", "payloadMapper", "payload", "set", "onFailure"), {}),
    "email": (_email, ("to", "subject", "next"), ("body",), {}),
    "agent": (_callable_step("agent", "agent"), ("agent", "next"), ("input", "set"), {}),
    "script": (_callable_step("script", "script"), ("script", "next"), ("input", "set"), {}),
    "complete": (_complete, (), (), {}),
    "fail": (_fail, (), ("errorType", "message", "messageFactory"), {}),
    "end": (_end, (), ("reason",), {}),
}


# --- graph rules -----------------------------------------------------------------------------


def successors(step: dict[str, Any]) -> list[tuple[str, str]]:
    """(pointer suffix, step id) of every step a step can lead to."""
    out: list[tuple[str, str | None]] = [("/next", step.get("next"))]
    kind = step.get("type")
    if kind == "service":
        out.append(("/compensation", step.get("compensation")))
    elif kind == "wait-signal" and step.get("timeout"):
        out.append(("/timeout/next", step["timeout"].get("next")))
    elif kind == "human-task":
        out.extend((f"/decisions/{i}/next", d.get("next")) for i, d in enumerate(step.get("decisions") or []))
        if step.get("due"):
            out.append(("/due/next", step["due"].get("next")))
    elif kind == "decision":
        out.extend((f"/routes/{i}/to", r.get("to")) for i, r in enumerate(step.get("routes") or []))
        out.append(("/default", step.get("default")))
    elif kind == "fork":
        out.extend((f"/branches/{i}", b) for i, b in enumerate(step.get("branches") or []))
        out.append(("/join", step.get("join")))
    elif kind in ("join", "call"):
        out.append(("/onFailure", step.get("onFailure")))
    return [(suffix, target) for suffix, target in out if target]


def graph_violations(spec: dict[str, Any]) -> list[Violation]:
    found: list[Violation] = []
    steps: list[dict[str, Any]] = spec.get("steps") or []
    by_id: dict[str, tuple[int, dict[str, Any]]] = {}
    for index, step in enumerate(steps):
        sid = step.get("id")
        if not sid:
            continue
        if sid in by_id:
            found.append(Violation(f"/steps/{index}/id", "unique", f"step id{echo(sid)} is used twice"))
            continue
        by_id[sid] = (index, step)

    def exists(at: str, target: str) -> bool:
        if target not in by_id:
            found.append(Violation(at, "reference", f"no step has the id{echo(target)}"))
            return False
        return True

    initial = spec.get("initialStep")
    if initial:
        exists("/initialStep", initial)
    for index, step in enumerate(steps):
        for suffix, target in successors(step):
            exists(f"/steps/{index}{suffix}", target)
        kind = step.get("type")
        at = f"/steps/{index}"
        compensation = step.get("compensation")
        if kind == "service" and compensation in by_id and by_id[compensation][1].get("type") != "compensation":
            found.append(Violation(f"{at}/compensation", "reference", "compensation must name a compensation step"))
        if kind == "compensation" and step.get("forwardStep") and exists(f"{at}/forwardStep", step["forwardStep"]):
            forward = by_id[step["forwardStep"]][1]
            if forward.get("type") != "service" or forward.get("compensation") != step.get("id"):
                found.append(
                    Violation(f"{at}/forwardStep", "reference", "forwardStep must be a service step naming this step")
                )
        if kind in ("join", "call") and step.get("onFailure") == step.get("id"):
            found.append(Violation(f"{at}/onFailure", "reference", "onFailure must lead to another step"))
    found.extend(_fork_join(steps, by_id))

    # reachability from initialStep
    if initial in by_id:
        seen = {initial}
        queue = [initial]
        while queue:
            current = by_id[queue.pop()][1]
            for _suffix, target in successors(current):
                if target in by_id and target not in seen:
                    seen.add(target)
                    queue.append(target)
        for sid, (index, _step) in by_id.items():
            if sid not in seen:
                found.append(Violation(f"/steps/{index}/id", "unreachable", f"step{echo(sid)} is not reachable"))
    return found


def _fork_join(steps: list[dict[str, Any]], by_id: dict[str, tuple[int, dict[str, Any]]]) -> list[Violation]:
    found: list[Violation] = []
    joined_by: dict[str, int] = {}
    for index, step in enumerate(steps):
        if step.get("type") != "fork":
            continue
        at = f"/steps/{index}"
        join = step.get("join")
        if join not in by_id:
            continue
        join_step = by_id[join][1]
        if join_step.get("type") != "join":
            found.append(Violation(f"{at}/join", "reference", "join must name a join step"))
            continue
        if join in joined_by:
            found.append(Violation(f"{at}/join", "pairing", f"join{echo(join)} already closes another fork"))
            continue
        joined_by[join] = index
        branches = [b for b in step.get("branches") or [] if b]
        if len(set(branches)) != len(branches):
            found.append(Violation(f"{at}/branches", "unique", "a branch is listed twice"))
        count = join_step.get("count")
        if join_step.get("policy") == "n-of-m" and count is not None and count > len(branches):
            found.append(
                Violation(f"/steps/{by_id[join][0]}/count", "range", "count is larger than the number of branches")
            )
        for b_index, branch in enumerate(branches):
            if branch in by_id and not _reaches(branch, join, by_id):
                found.append(
                    Violation(f"{at}/branches/{b_index}", "pairing", f"branch{echo(branch)} never reaches its join")
                )
    for sid, (index, step) in by_id.items():
        if step.get("type") == "join" and sid not in joined_by:
            found.append(Violation(f"/steps/{index}/id", "pairing", f"join{echo(sid)} closes no fork"))
    return found


def _reaches(start: str, goal: str, by_id: dict[str, tuple[int, dict[str, Any]]]) -> bool:
    seen = {start}
    queue = [start]
    while queue:
        current = queue.pop()
        if current == goal:
            return True
        for _suffix, target in successors(by_id[current][1]):
            if target in by_id and target not in seen:
                seen.add(target)
                queue.append(target)
    return False
