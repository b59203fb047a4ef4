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

The plan hash is the SHA-256 of the canonical JSON of the normalised spec (catalog names, not
what they resolve to, as the reference hashes logical type names): comments, key order,
whitespace, aliases and spelled-out defaults do not change it; any behavioural change does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, NoReturn

from workflows.definitions import catalogs, expressions, plan, schemas
from workflows.definitions.documents import Document, parse
from workflows.definitions.names import echo, safe_pointer
from workflows.definitions.validation import Checker, graph_violations, normalise
from workflows.exceptions import DefinitionError, UnknownTypeName, Violation

UNKNOWN_NAME = "unknownName"

# The variables each kind of field provides to CEL and to callbacks.
V_PAYLOAD = ("payload",)
V_STATE = ("state",)
V_WHEN = ("state", "conditions")  # a decision route's ``when``: the state and the named conditions
V_TRIGGER = ("record", "previous", "changed", "event")
V_TRIGGER_PAYLOAD = ("record", "previous", "changed", "event")
V_SIGNAL = ("state", "payload")
V_DECISION = ("state", "payload", "decision")
V_RESULT = ("state", "result")
V_CALL_RESULT = ("state", "result", "status")
V_JOIN = ("state", "results")
V_CALLABLE = ("input", "state")


def plan_hash(spec: Mapping[str, Any]) -> str:
    hashed = {k: v for k, v in spec.items() if not k.startswith("_")}
    return hashlib.sha256(schemas.canonical_json(hashed).encode("utf-8")).hexdigest()


class _Build:
    """Resolution state for one document."""

    def __init__(self, document: Document | None) -> None:
        self.document = document
        self.violations: list[Violation] = []
        self.unknown_names = False

    def add(self, at: str, kind: str, message: str) -> None:
        self.violations.append(Violation(at, kind, message))

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
                self.add(at, error.problem.kind, error.problem.message)
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
            self.add(at, error.problem.kind, f"a placeholder: {error.problem.message}")
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

    def step(self, s: Mapping[str, Any], at: str, contract: plan.Contract | None) -> plan.Step | None:
        kind = s.get("type")
        sid = s.get("id") or ""
        comp = self.computation
        if kind == "service":
            target = s.get("target") or ""
            if target and not target.startswith("https://") and catalogs.callbacks.get(target, "service") is None:
                self.add(f"{at}/target", "unknownCallback", f"no service handler is registered as{echo(target)}")
            return plan.ServiceStep(
                id=sid,
                type=kind,
                next=s.get("next"),
                target=target,
                payload=comp(s.get("payload"), f"{at}/{_field(s.get('payload'), 'payload', 'payloadMapper')}", V_STATE),
                set=comp(s.get("set"), f"{at}/set", V_RESULT),
                compensation=s.get("compensation"),
            )
        if kind == "wait-signal":
            signal = s.get("signal") or ""
            payload_schema = self.schema(s.get("payloadSchema"), f"{at}/payloadSchema")
            if contract is not None and signal and signal not in contract.signals:
                self.add(f"{at}/signal", "undeclaredSignal", f"the contract does not declare the signal{echo(signal)}")
            if payload_schema is None and contract is not None and signal in contract.signals:
                payload_schema = contract.signals[signal]
            timeout = None
            if s.get("timeout"):
                t = s["timeout"]
                timeout = plan.Timeout(
                    delay=self.delay(t.get("delay"), f"{at}/timeout"),
                    next=t.get("next") or "",
                    set=comp(t.get("set"), f"{at}/timeout/{_field(t.get('set'), 'set', 'mutator')}", V_STATE),
                )
            return plan.WaitSignalStep(
                id=sid,
                type=kind,
                next=s.get("next"),
                signal=signal,
                payload_schema=payload_schema,
                set=comp(s.get("set"), f"{at}/{_field(s.get('set'), 'set', 'stateReducer')}", V_SIGNAL),
                timeout=timeout,
            )
        if kind == "timer":
            return plan.TimerStep(
                id=sid,
                type=kind,
                next=s.get("next"),
                delay=self.delay(s.get("delay"), at),
                set=comp(s.get("set"), f"{at}/{_field(s.get('set'), 'set', 'mutator')}", V_STATE),
            )
        if kind == "human-task":
            return self.human_task(s, at)
        if kind == "decision":
            routes = []
            conditions: dict[str, Any] = {}
            for index, r in enumerate(s.get("routes") or []):
                condition = None
                when = None
                uses: tuple[str, ...] = ()
                if r.get("when"):
                    where = f"{at}/routes/{index}/when"
                    when = comp(r["when"], where, V_WHEN)
                    uses = self.conditions_read(when, where, conditions)
                elif r.get("condition"):
                    condition = r["condition"]["callback"]
                    found = self.callback(r["condition"], f"{at}/routes/{index}/condition", V_STATE)
                    if found is not None:
                        conditions[condition] = found
                routes.append(plan.Route(to=r.get("to") or "", when=when, condition=condition, uses=uses))
            return plan.DecisionStep(
                id=sid, type=kind, routes=tuple(routes), default=s.get("default") or "", conditions=conditions
            )
        if kind == "fork":
            return plan.ForkStep(
                id=sid,
                type=kind,
                branches=tuple(b for b in s.get("branches") or [] if b),
                join=s.get("join") or "",
                retry_max_attempts=s.get("retryMaxAttempts") or 1,
            )
        if kind == "join":
            return plan.JoinStep(
                id=sid,
                type=kind,
                next=s.get("next"),
                policy=s.get("policy") or "all",
                count=s.get("count"),
                reducer=comp(s.get("set"), f"{at}/{_field(s.get('set'), 'set', 'reducer')}", V_JOIN),
                on_failure=s.get("onFailure"),
            )
        if kind == "compensation":
            target = s.get("target") or ""
            if target and not target.startswith("https://") and catalogs.callbacks.get(target, "service") is None:
                self.add(f"{at}/target", "unknownCallback", f"no service handler is registered as{echo(target)}")
            return plan.CompensationStep(
                id=sid,
                type=kind,
                forward_step=s.get("forwardStep") or "",
                target=target,
                payload=comp(s.get("payload"), f"{at}/{_field(s.get('payload'), 'payload', 'payloadMapper')}", V_STATE),
            )
        if kind == "call":
            return plan.CallStep(
                id=sid,
                type=kind,
                next=s.get("next"),
                definition_id=s.get("definitionId") or "",
                version=s.get("version"),
                payload=comp(s.get("payload"), f"{at}/{_field(s.get('payload'), 'payload', 'payloadMapper')}", V_STATE),
                set=comp(s.get("set"), f"{at}/set", V_CALL_RESULT),
                on_failure=s.get("onFailure"),
            )
        if kind == "email":
            return plan.EmailStep(
                id=sid,
                type=kind,
                next=s.get("next"),
                to=comp(s.get("to"), f"{at}/to", V_STATE),
                subject=s.get("subject") or "",
                body=s.get("body") or "",
                subject_template=self.template(s.get("subject"), f"{at}/subject"),
                body_template=self.template(s.get("body"), f"{at}/body"),
            )
        if kind in ("agent", "script"):
            ref = s.get(kind)
            call = self.callback(ref, f"{at}/{kind}", V_CALLABLE) if ref else None
            cls = plan.AgentStep if kind == "agent" else plan.ScriptStep
            named = {kind: ref["callback"] if ref else ""}
            return cls(
                id=sid,
                type=kind,
                next=s.get("next"),
                input=comp(s.get("input"), f"{at}/input", V_STATE),
                set=comp(s.get("set"), f"{at}/set", V_RESULT),
                call=call,
                **named,
            )
        if kind == "complete":
            return plan.CompleteStep(id=sid, type=kind)
        if kind == "fail":
            message = s.get("message")
            where = f"{at}/messageFactory" if message and "callback" in message else f"{at}/message"
            return plan.FailStep(
                id=sid, type=kind, error_type=s.get("errorType") or "failed", message=comp(message, where, V_STATE)
            )
        if kind == "end":
            return plan.EndStep(id=sid, type=kind, reason=s.get("reason"))
        return None

    def human_task(self, s: Mapping[str, Any], at: str) -> plan.HumanTaskStep:
        a = s.get("assignment") or {}
        mode = a.get("mode") or "group"
        if mode == "expression":
            value = a.get("value") or {}
            assignment = plan.Assignment(
                mode="expression", expression=self.computation(value, f"{at}/assignment/value", V_STATE)
            )
        else:
            assignment = plan.Assignment(mode=mode, value=a.get("value"))
        decisions = []
        for index, d in enumerate(s.get("decisions") or []):
            here = f"{at}/decisions/{index}"
            decisions.append(
                plan.TaskDecision(
                    name=d.get("name") or "",
                    next=d.get("next") or "",
                    payload_schema=self.schema(d.get("payloadSchema"), f"{here}/payloadSchema"),
                    set=self.computation(
                        d.get("set"), f"{here}/{_field(d.get('set'), 'set', 'applicator')}", V_DECISION
                    ),
                    label=d.get("label"),
                )
            )
        due = None
        if s.get("due"):
            d = s["due"]
            due = plan.Due(
                delay=self.delay(d.get("delay"), f"{at}/due"),
                next=d.get("next") or "",
                set=self.computation(d.get("set"), f"{at}/due/{_field(d.get('set'), 'set', 'mutator')}", V_STATE),
            )
        return plan.HumanTaskStep(
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
            title_template=self.template(s.get("title"), f"{at}/title"),
            description_template=self.template(s.get("description"), f"{at}/description"),
        )


def _field(ref: Mapping[str, Any] | None, cel: str, callback: str) -> str:
    """The document field a computation came from (for the pointer of its violation)."""
    return callback if ref and "callback" in ref else cel


def _trigger(build: _Build, spec: Mapping[str, Any] | None) -> plan.Trigger | None:
    if not spec:
        return None
    model = spec.get("model")
    if model:
        from django.apps import apps

        try:
            apps.get_model(model)
        except (LookupError, ValueError):
            build.add("/trigger/model", "unknownModel", "the trigger names a model that is not installed")
    return plan.Trigger(
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
        out.append(Violation(at, v.type, v.message, v.line if v.line is not None else document.line(at)))
    return out


def _raise(build: _Build, violations: list[Violation]) -> NoReturn:
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
    build = _Build(document)
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


def _compile_spec(spec: dict[str, Any], build: _Build) -> plan.Plan:
    build.violations.extend(graph_violations(spec))

    # names, in the reference's order
    contract = build.contract(spec.get("contract"))
    state_schema = build.schema(spec.get("stateSchema"), "/stateSchema")
    start_schema = build.schema(spec.get("startPayloadSchema"), "/startPayloadSchema")
    steps_spec: list[dict[str, Any]] = spec.get("steps") or []
    for index, s in enumerate(steps_spec):
        if s.get("type") == "wait-signal":
            build.schema(s.get("payloadSchema"), f"/steps/{index}/payloadSchema")
        elif s.get("type") == "human-task":
            for d_index, d in enumerate(s.get("decisions") or []):
                build.schema(d.get("payloadSchema"), f"/steps/{index}/decisions/{d_index}/payloadSchema")
    if build.unknown_names:
        _raise(build, build.violations)

    top = spec
    initial_state = build.computation(
        top.get("initialState"), "/" + _field(top.get("initialState"), "initialState", "initialStateMapper"), V_PAYLOAD
    )
    subject_at = "/" + _field(top.get("subject"), "subject", "subjectResolver")
    subject = build.computation(top.get("subject"), subject_at, V_STATE)
    trigger = _trigger(build, spec.get("trigger"))
    steps: dict[str, plan.Step] = {}
    for index, s in enumerate(steps_spec):
        built = build.step(s, f"/steps/{index}", contract)
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
