"""Shape and graph rules of a definition document: catalog-free, value-free, everything at once.

:func:`normalise` checks the document's shape strictly (unknown fields, missing required
fields, wrong types, mutually exclusive forms, the reference's Java-style aliases such as
``stateType`` / ``payloadType``) and answers the **normalised spec**: plain JSON with one
spelling per field, defaults filled in and durations in seconds. The spec is what the plan hash
covers, so key order, comments, aliases and spelled-out defaults never change the hash.

:func:`graph_violations` checks the step graph: unique ids, every reference resolves, every
step reachable from ``initialStep``, forks and joins pair up, n-of-m counts fit.

The fields of each step type are read by its reader (:mod:`workflows.definitions.steps`);
the graph rules follow every exit the step types declare.

Names resolved through catalogs (contracts, schemas, callbacks), CEL compilation and the plan
rules that need the contract live in :mod:`workflows.definitions.compiler`.
"""

from __future__ import annotations

import re
from typing import Any

from workflows.definitions.names import echo, is_safe
from workflows.definitions.reading import Checker, escape
from workflows.definitions.steps import REGISTRY, exits
from workflows.exceptions import Violation

TRIGGER_EVENTS = ("created", "updated", "deleted")


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
        here = f"/contract/signals/{escape(signal)}"
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
        value,
        "/trigger",
        required=("model", "on"),
        optional=("when", "payload", "businessKey", "ownerField"),
        what="trigger",
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
    found = {
        "model": model,
        "on": sorted(on, key=TRIGGER_EVENTS.index),
        "when": checker.expression(obj.get("when"), "/trigger/when"),
        "payload": checker.expression(obj.get("payload"), "/trigger/payload"),
        "businessKey": checker.expression(obj.get("businessKey"), "/trigger/businessKey"),
    }
    if obj.get("ownerField") is not None:
        # only when given: the normalised spec (and so the plan hash) of a trigger without an
        # owner field stays what it was before the field existed
        owner = checker.string(obj.get("ownerField"), "/trigger/ownerField", max_length=255)
        if owner is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", owner):
            checker.add("/trigger/ownerField", "pattern", "ownerField must be a field name of the model")
            owner = None
        found["ownerField"] = owner
    return found


# --- steps -----------------------------------------------------------------------------------


def _step(value: Any, at: str, checker: Checker) -> dict[str, Any]:
    if not isinstance(value, dict):
        checker.add(at, "type", "a step must be a mapping")
        return {}
    step_type = value.get("type")
    kind = REGISTRY.get(step_type) if isinstance(step_type, str) else None
    if kind is None:
        if step_type is None:
            checker.add(f"{at}/type", "required", "field 'type' is required")
        else:
            checker.add(f"{at}/type", "enum", f"unknown step type{echo(step_type)}")
        checker.name(value.get("id"), f"{at}/id", "step id")
        return {"id": value.get("id") if is_safe(value.get("id")) else None, "type": None}
    obj = checker.fields(
        value,
        at,
        required=("id", "type", *kind.required),
        optional=kind.optional,
        aliases=dict(kind.aliases),
        what=f"{step_type} step",
    )
    assert obj is not None
    out = {"id": checker.name(obj.get("id"), f"{at}/id", "step id"), "type": step_type}
    out.update(kind.read(obj, at, checker))
    return out


# --- graph rules -----------------------------------------------------------------------------


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
        for edge in exits(step):
            exists(f"/steps/{index}{edge.pointer}", edge.target)
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
            for edge in exits(current):
                if edge.target in by_id and edge.target not in seen:
                    seen.add(edge.target)
                    queue.append(edge.target)
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
        for edge in exits(by_id[current][1]):
            if edge.target in by_id and edge.target not in seen:
                seen.add(edge.target)
                queue.append(edge.target)
    return False
