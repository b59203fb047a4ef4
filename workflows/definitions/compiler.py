"""Document -> frozen :class:`~workflows.definitions.plan.Plan`: compile once, report everything.

The pipeline (each stage collects every violation it finds; all are raised together):

1. :func:`validation.normalise` — strict shape, one spelling per field (the normalised spec);
2. :func:`validation.graph_violations` — ids, references, reachability, fork/join pairing;
3. names through the catalogs only, in the reference's order: the contract, the state schema,
   the start payload schema, then signal and decision payload schemas in step order; an
   unknown contract or type name makes the error :class:`UnknownTypeName`;
4. callbacks (by category, and their parameters must fit the field's variables), CEL
   expressions and ``{{ }}`` templates, inline schemas (no non-local ``$ref``);
5. plan rules: a wait accepts only signals its contract declares; a trigger names an installed
   model.

Each step is built by its step type's compile function (``StepType.compile``, in
:mod:`workflows.definitions.steps`), which resolves its fields through :class:`Build`.

The plan hash is the SHA-256 of the canonical JSON of the normalised spec (catalog names, not
what they resolve to, as the reference hashes logical type names): comments, key order,
whitespace, aliases and spelled-out defaults do not change it; any behavioural change does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NoReturn

from workflows.definitions import catalogs, expressions, plan, schemas
from workflows.definitions.documents import Document, parse
from workflows.definitions.names import echo, safe_pointer
from workflows.definitions.reading import Checker
from workflows.definitions.steps import REGISTRY
from workflows.definitions.steps.base import V_PAYLOAD, V_STATE, V_TRIGGER, V_TRIGGER_PAYLOAD, source_field
from workflows.definitions.validation import graph_violations, normalise
from workflows.exceptions import DefinitionError, UnknownTypeName, Violation

UNKNOWN_NAME = "unknownName"


def plan_hash(spec: Mapping[str, Any]) -> str:
    hashed = {k: v for k, v in spec.items() if not k.startswith("_")}
    return hashlib.sha256(schemas.canonical_json(hashed).encode("utf-8")).hexdigest()


class Build:
    """Resolution state for one document (step types compile through it: ``StepType.compile``)."""

    def __init__(self, document: Document | None) -> None:
        self.document = document
        self.violations: list[Violation] = []
        self.unknown_names = False

    def add(self, at: str, kind: str, message: str, expression_column: int | None = None) -> None:
        self.violations.append(Violation(at, kind, message, expression_column=expression_column))

    # --- names -------------------------------------------------------------------------------

    def schema(self, ref: Mapping[str, Any] | None, at: str) -> Any:
        """Resolve ``{"type": name}`` / ``{"inline": schema}``; None when absent or broken."""
        if not ref:
            return None
        if "type" in ref:
            found = catalogs.types.get(ref["type"])
            if found is None:
                self.unknown_names = True
                self.add(at, UNKNOWN_NAME, f"unknown type name{echo(ref['type'])}")
            return found
        inline = ref["inline"]
        problems = schemas.check_schema(inline, at=at)
        self.violations.extend(problems)
        return None if problems else inline

    def contract(self, spec: Mapping[str, Any] | None) -> plan.Contract | None:
        if not spec or not spec.get("name"):
            return None
        if spec.get("inline"):
            signals = {name: self.schema(ref, f"/contract/signals/{name}") for name, ref in spec["signals"].items()}
            start = self.schema(spec["startSchema"], "/contract/startSchema")
            return plan.Contract(name=spec["name"], signals=signals, start_schema=start)
        entry = catalogs.contracts.get(spec["name"])
        if entry is None:
            self.unknown_names = True
            self.add("/contract", UNKNOWN_NAME, f"unknown contract name{echo(spec['name'])}")
            return None
        return plan.Contract(
            name=entry.name,
            signals={name: self._catalog_schema(value) for name, value in entry.signals.items()},
            start_schema=self._catalog_schema(entry.start_schema),
        )

    def _catalog_schema(self, value: Any) -> Any:
        if isinstance(value, str):
            found = catalogs.types.get(value)
            if found is None:
                self.unknown_names = True
                self.add("/contract", UNKNOWN_NAME, f"the contract names an unknown type{echo(value)}")
            return found
        return value

    # --- computations ------------------------------------------------------------------------

    def computation(self, ref: Mapping[str, Any] | None, at: str, variables: tuple[str, ...]) -> Any:
        if not ref:
            return None
        if "cel" in ref:
            try:
                return expressions.compile_expression(ref["cel"], variables, merge=bool(ref.get("merge")))
            except expressions.ExpressionCompileError as error:
                self.add(at, error.problem.kind, error.problem.message, error.problem.column)
                return None
        if "template" in ref:
            return self.template(ref["template"], at, variables)
        return self.callback(ref, at, variables)

    def conditions_read(self, when: Any, at: str, conditions: dict[str, Any]) -> tuple[str, ...]:
        """The named conditions a route's ``when`` reads (``conditions['id']``): each must be a
        registered condition callback, checked here at load; they join the step's conditions,
        evaluated once per decision evaluation."""
        if when is None or expressions.CONDITIONS not in getattr(when, "variables", ()):
            return ()
        try:
            names = expressions.condition_names(when.ast)
        except expressions.ExpressionCompileError as error:
            self.add(at, error.problem.kind, error.problem.message)
            return ()
        for name in names:
            found = self.callback({"callback": name, "category": "condition"}, at, V_STATE)
            if found is not None:
                conditions.setdefault(name, found)
        return names

    def callback(self, ref: Mapping[str, Any], at: str, variables: tuple[str, ...] | None) -> Any:
        name, category = ref["callback"], ref["category"]
        found = catalogs.callbacks.get(name, category)
        if found is None:
            self.add(at, "unknownCallback", f"no {category} callback is registered under the name{echo(name)}")
            return None
        if variables is not None and found.missing(variables):
            allowed = ", ".join(variables)
            self.add(at, "callbackSignature", f"the callback's required parameters must be among: {allowed}")
            return None
        return catalogs.CallbackComputation(source=name, category=category, callback=found)

    def template(self, text: str | None, at: str, variables: tuple[str, ...] = V_STATE) -> Any:
        if not text or "{{" not in text:
            return None if not text else expressions.Template(source=text, parts=(text,))
        try:
            return expressions.compile_template(text, variables)
        except expressions.ExpressionCompileError as error:
            self.add(at, error.problem.kind, f"a placeholder: {error.problem.message}", error.problem.column)
            return None

    def delay(self, spec: Mapping[str, Any] | None, at: str) -> plan.Delay:
        spec = spec or {}
        if spec.get("after") is not None:
            return plan.Delay(seconds=float(spec["after"]))
        if spec.get("at"):
            where = f"{at}/fireAt" if "callback" in spec["at"] else f"{at}/at"
            return plan.Delay(at=self.computation(spec["at"], where, V_STATE))
        return plan.Delay()

    # --- steps -------------------------------------------------------------------------------


def _trigger(build: Build, spec: Mapping[str, Any] | None) -> plan.Trigger | None:
    if not spec:
        return None
    model = spec.get("model")
    owner_field = spec.get("ownerField") or None
    if model:
        from django.apps import apps
        from django.core.exceptions import FieldDoesNotExist

        try:
            found = apps.get_model(model)
        except (LookupError, ValueError):
            build.add("/trigger/model", "unknownModel", "the trigger names a model that is not installed")
        else:
            if owner_field:
                try:
                    found._meta.get_field(owner_field)
                except FieldDoesNotExist:
                    build.add("/trigger/ownerField", "unknownField", "the trigger's model has no field of this name")
    return plan.Trigger(
        owner_field=owner_field,
        model=model or "",
        on=tuple(spec.get("on") or ()),
        when=build.computation(spec.get("when"), "/trigger/when", V_TRIGGER),
        payload=build.computation(spec.get("payload"), "/trigger/payload", V_TRIGGER_PAYLOAD),
        business_key=build.computation(spec.get("businessKey"), "/trigger/businessKey", V_TRIGGER_PAYLOAD),
    )


ALIASES = {
    "stateSchema": "stateType",
    "startPayloadSchema": "startPayloadType",
    "payloadSchema": "payloadType",
    "mutator": "onTimeoutMutator",
}


def _document_pointer(pointer: str, document: Document) -> str:
    """The pointer as the document spells it (``/stateType`` for a normalised ``/stateSchema``)."""
    parts = pointer.split("/")[1:]
    out = ""
    for part in parts:
        candidate = f"{out}/{part}"
        alias = ALIASES.get(part)
        if candidate not in document.lines and alias and f"{out}/{alias}" in document.lines:
            candidate = f"{out}/{alias}"
        out = candidate
    return out


def _with_lines(violations: list[Violation], document: Document | None) -> list[Violation]:
    if document is None:
        return violations
    out = []
    for v in violations:
        at = _document_pointer(v.pointer, document) if v.pointer else v.pointer
        out.append(document.locate(replace(v, pointer=at)))
    return out


def _raise(build: Build, violations: list[Violation]) -> NoReturn:
    violations = _with_lines(violations, build.document)
    unknown = [v for v in violations if v.type == UNKNOWN_NAME]
    if unknown:
        first = unknown[0]
        raise UnknownTypeName(f"unknown name at {safe_pointer(first.pointer)}: {first.message}", violations=violations)
    first = violations[0]
    where = safe_pointer(first.pointer) if first.pointer else "the document"
    count = len(violations)
    raise DefinitionError(
        f"definition is not valid ({count} violation{'s' if count > 1 else ''}); first at {where}: {first.message}",
        violations=violations,
    )


def compile_data(data: dict[str, Any], document: Document | None = None) -> plan.Plan:
    """Compile parsed document data into a :class:`Plan`; raises :class:`DefinitionError`."""
    checker = Checker()
    spec = normalise(data, checker)
    build = Build(document)
    build.violations.extend(checker.violations)
    try:
        return _compile_spec(spec, build)
    except DefinitionError:
        raise
    except Exception:
        # a document with shape violations can leave a partial spec behind; those violations
        # are the answer (anything else is a bug and propagates)
        if checker.violations:
            _raise(build, _dedupe(build.violations))
        raise


def _compile_spec(spec: dict[str, Any], build: Build) -> plan.Plan:
    build.violations.extend(graph_violations(spec))

    # names, in the reference's order
    contract = build.contract(spec.get("contract"))
    state_schema = build.schema(spec.get("stateSchema"), "/stateSchema")
    start_schema = build.schema(spec.get("startPayloadSchema"), "/startPayloadSchema")
    steps_spec: list[dict[str, Any]] = spec.get("steps") or []
    for index, s in enumerate(steps_spec):
        kind = REGISTRY.get(s.get("type") or "")
        for suffix, ref in kind.schemas(s) if kind is not None else ():
            build.schema(ref, f"/steps/{index}{suffix}")
    if build.unknown_names:
        _raise(build, build.violations)

    top = spec
    initial_state = build.computation(
        top.get("initialState"),
        "/" + source_field(top.get("initialState"), "initialState", "initialStateMapper"),
        V_PAYLOAD,
    )
    subject_at = "/" + source_field(top.get("subject"), "subject", "subjectResolver")
    subject = build.computation(top.get("subject"), subject_at, V_STATE)
    trigger = _trigger(build, spec.get("trigger"))
    steps: dict[str, plan.Step] = {}
    for index, s in enumerate(steps_spec):
        kind = REGISTRY.get(s.get("type") or "")
        built = kind.compile(build, s, f"/steps/{index}", contract) if kind is not None else None
        if built is not None and built.id and built.id not in steps:
            steps[built.id] = built
    # the step pass resolved payload schemas a second time: keep one report per pointer
    build.violations = _dedupe(build.violations)
    if build.violations:
        _raise(build, build.violations)
    assert contract is not None
    state_ref = spec.get("stateSchema") or {}
    return plan.Plan(
        definition_id=spec["definitionId"],
        version=spec["definitionVersion"],
        plan_hash=plan_hash(spec),
        contract=contract,
        state_schema=state_schema,
        start_schema=start_schema if start_schema is not None else contract.start_schema,
        initial_step=spec["initialStep"],
        steps=steps,
        initial_state=initial_state,
        subject=subject,
        trigger=trigger,
        activate_on_deploy=spec.get("_activateOnDeploy", True),
        text_digest=build.document.digest if build.document is not None else "",
        spec={k: v for k, v in spec.items() if not k.startswith("_")},
        state_schema_name=state_ref.get("type"),
    )


def _dedupe(violations: list[Violation]) -> list[Violation]:
    seen: set[tuple[str, str, str]] = set()
    out: list[Violation] = []
    for v in violations:
        key = (v.pointer, v.type, v.message)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def compile_document(document: Document) -> plan.Plan:
    return compile_data(document.data, document)


def compile_text(text: str | bytes, format: str = "yaml") -> plan.Plan:
    """Parse, validate and compile a document; raises :class:`DefinitionError` (every violation)."""
    return compile_document(parse(text, format))
