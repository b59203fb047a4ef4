"""Forms of the designer: the step form (add or edit a step of any type) and the deploy form.

The step form is built from :data:`TYPE_FIELDS`, one list of fields per step type (the table in
``docs/authoring.md``). Its values become a step mapping (:meth:`StepForm.to_step`) that
``services.apply_step`` writes into the document. Fields the form does not show (a decision's
payload schema, a callback name, ...) are kept from the step being edited. CEL fields and
templates are compiled with the variables their field provides, as typed (through the
``designer:cel`` endpoint) and again when the form is submitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.urls import reverse

from designer import services
from workflows import jsonvalues

STEP_TYPES = (
    ("human-task", "Human task — a person decides"),
    ("service", "Service — call a handler or webhook"),
    ("wait-signal", "Signal wait — wait for a signal"),
    ("timer", "Timer — wait for a time"),
    ("decision", "Decision — route on a condition"),
    ("fork", "Fork — start parallel branches"),
    ("join", "Join — wait for branches"),
    ("compensation", "Compensation — undo a service"),
    ("call", "Call — run another workflow"),
    ("email", "Email — send a message"),
    ("agent", "Agent — ask a registered agent"),
    ("script", "Script — run a registered script"),
    ("complete", "Complete — end successfully"),
    ("fail", "Fail — end as failed"),
    ("end", "End — terminate the run"),
)
TYPE_NAMES = [t for t, _ in STEP_TYPES]
ROWS_MIN = 3  # empty rows offered for decisions and routes
ROWS_MAX = 20


@dataclass(frozen=True)
class Spec:
    """One field of a step: ``key`` is its path in the step (``due/after``)."""

    key: str
    label: str
    kind: str = "text"  # text | cel | template | duration | step | steps | choice | int | bool | longtemplate
    help: str = ""
    variables: str = "state"  # for cel/template: services.CEL_VARIABLES key
    choices: tuple[str, ...] = ()
    required: bool = False

    @property
    def name(self) -> str:
        return "f_" + self.key.replace("/", "__")


# required, but may be left empty when the step is connected on an exit (it continues there)
NEXT = Spec("next", "Next step", "step", "The step that follows; empty: where the exit it is connected on led.")
TYPE_FIELDS: dict[str, tuple[Spec, ...]] = {
    "service": (
        Spec("target", "Target", help="A registered service handler or an https:// webhook URL.", required=True),
        Spec("payload", "Payload (CEL)", "cel", "What is sent, computed from state.", "state"),
        Spec("set", "Set from result (CEL)", "cel", "A map merged into the state, from state and result.", "result"),
        NEXT,
        Spec("compensation", "Compensation step", "step", "The compensation step that undoes this service."),
    ),
    "wait-signal": (
        Spec("signal", "Signal", help="A signal the contract declares.", required=True),
        Spec("set", "Set from signal (CEL)", "cel", "A map merged into the state, from state and payload.", "signal"),
        NEXT,
        Spec("timeout/after", "Timeout after", "duration", "ISO-8601 duration, for example PT15M or P2D."),
        Spec("timeout/next", "On timeout go to", "step"),
    ),
    "timer": (
        Spec("after", "Wait for", "duration", "ISO-8601 duration, for example PT10M. Or give 'Until'."),
        Spec("at", "Until (CEL)", "cel", 'An instant from state, for example timestamp("2030-01-01T09:00:00Z").'),
        Spec("set", "Set when it fires (CEL)", "cel", "A map merged into the state.", "state"),
        NEXT,
    ),
    "human-task": (
        Spec("title", "Title", "template", "Shown to the assignee; {{ state.x }} placeholders allowed.", "state"),
        Spec("description", "Description", "longtemplate", "{{ state.x }} placeholders allowed.", "state"),
        Spec("taskType", "Task type", help="A free label, for example approval."),
        Spec("assignment/mode", "Assign to", "choice", choices=("group", "user", "expression"), required=True),
        Spec(
            "assignment/value",
            "Assignee",
            help='A group name, a user name, or for \'expression\' CEL over state giving "group:x" or "user:y".',
            required=True,
        ),
        Spec("due/after", "Due after", "duration", "ISO-8601 duration, for example P3D."),
        Spec("due/next", "When due go to", "step"),
        Spec("reminders/every", "Remind every", "duration", "ISO-8601 duration, for example P1D."),
        Spec("requireVersionStability", "Refuse decisions on a changed subject", "bool"),
    ),
    "decision": (Spec("default", "Otherwise go to", "step", "Where a run goes when no route holds.", required=True),),
    "fork": (
        Spec("branches", "Branches", "steps", "The first step of each branch, separated by commas.", required=True),
        Spec("join", "Join step", "step", "The join every branch leads to.", required=True),
    ),
    "join": (
        Spec("policy", "Policy", "choice", choices=("all", "any", "n-of-m"), required=True),
        Spec("count", "Count (n-of-m)", "int", "How many branches must complete for n-of-m."),
        Spec("set", "Set from results (CEL)", "cel", "A map merged into the state, from state and results.", "join"),
        NEXT,
        Spec("onFailure", "On failure go to", "step"),
    ),
    "compensation": (
        Spec("forwardStep", "Undoes service step", "step", required=True),
        Spec("target", "Target", help="A registered service handler or an https:// webhook URL.", required=True),
        Spec("payload", "Payload (CEL)", "cel", "What is sent, computed from state.", "state"),
    ),
    "call": (
        Spec("definitionId", "Workflow to call", help="The definition id of the child workflow.", required=True),
        Spec("version", "Version", "int", "Leave empty for the child's current version."),
        Spec("payload", "Payload (CEL)", "cel", "The child's start payload, from state.", "state"),
        Spec("set", "Set from result (CEL)", "cel", "From state, result (the child's state) and status.", "call"),
        NEXT,
        Spec("onFailure", "On failure go to", "step"),
    ),
    "email": (
        Spec("to", "To (CEL)", "cel", "An address or a list of addresses, from state.", "state", required=True),
        Spec("subject", "Subject", "template", "{{ state.x }} placeholders allowed.", "state"),
        Spec("body", "Body", "longtemplate", "{{ state.x }} placeholders allowed.", "state"),
        NEXT,
    ),
    "agent": (
        Spec("agent", "Agent", help="A registered agent.", required=True),
        Spec("input", "Input (CEL)", "cel", "The agent's input, from state.", "state"),
        Spec("set", "Set from result (CEL)", "cel", "A map merged into the state.", "result"),
        NEXT,
    ),
    "script": (
        Spec("script", "Script", help="A registered script.", required=True),
        Spec("input", "Input (CEL)", "cel", "The script's input, from state.", "state"),
        Spec("set", "Set from result (CEL)", "cel", "A map merged into the state.", "result"),
        NEXT,
    ),
    "complete": (),
    "fail": (
        Spec("errorType", "Error type", help="A short code for the failure, for example request-rejected."),
        Spec("message", "Message", "template", "{{ state.x }} placeholders allowed.", "state"),
    ),
    "end": (Spec("reason", "Reason", help="Why the run ends here (optional)."),),
}
# Callback spellings a form value replaces (the document may hold only one of the two).
ALTERNATIVES = {
    "payload": ("payloadMapper",),
    "set": ("stateReducer", "mutator", "reducer", "applicator"),
    "message": ("messageFactory",),
    "at": ("fireAt",),
}
DECISION_ROW = (
    Spec("name", "Name"),
    Spec("label", "Label"),
    Spec("next", "Next step", "step"),
    Spec("set", "Set (CEL)", "cel", variables="decision"),
)
ROUTE_ROW = (Spec("when", "When (CEL)", "cel", variables="when"), Spec("to", "Go to", "step"))
ROW_KINDS = {"human-task": ("decisions", DECISION_ROW), "decision": ("routes", ROUTE_ROW)}


def _get(step: Mapping[str, Any], key: str) -> Any:
    value: Any = step
    for part in key.split("/"):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _put(step: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split("/")
    holder = step
    for part in parts[:-1]:
        if not isinstance(holder.get(part), dict):
            holder[part] = {}
        holder = holder[part]
    holder[parts[-1]] = value


def _drop(step: dict[str, Any], key: str) -> None:
    parts = key.split("/")
    holder: Any = step
    for part in parts[:-1]:
        holder = holder.get(part) if isinstance(holder, dict) else None
        if holder is None:
            return
    if isinstance(holder, dict):
        holder.pop(parts[-1], None)
    # an emptied parent (timeout: {}) goes too
    if len(parts) > 1 and isinstance(step.get(parts[0]), dict) and not step[parts[0]]:
        step.pop(parts[0])


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return jsonvalues.dumps(value)
    return str(value)


class StepForm(forms.Form):
    """A step of one type. ``step_ids`` feed the step pickers; ``slots`` the "connect from"
    choices (see ``services.outgoing_slots``); ``original`` is the step being edited."""

    step_type = forms.ChoiceField(choices=STEP_TYPES, label="Type")
    step_id = forms.CharField(
        label="Step id",
        max_length=255,
        help_text="Letters, digits and _ . $ - ; unique in the document.",
    )
    original_id = forms.CharField(required=False, widget=forms.HiddenInput)
    connect_from = forms.ChoiceField(
        required=False,
        label="Connect from",
        help_text="Optional: an exit of an existing step that should lead to this step.",
    )

    def __init__(
        self,
        *args: Any,
        step_type: str,
        step_ids: Sequence[str] = (),
        slots: Sequence[tuple[str, str, str]] = (),
        original: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.type = step_type if step_type in TYPE_FIELDS else "human-task"
        self.original = dict(original) if original else None
        self.step_ids = list(step_ids)
        self.fields["step_type"].initial = self.type
        connect = self.fields["connect_from"]
        assert isinstance(connect, forms.ChoiceField)
        connect.choices = [("", "— not connected —")] + [(k, label) for k, label, _t in slots]
        self.slots = {k: target for k, _label, target in slots}
        cel_url = reverse("designer:cel")
        self.specs = TYPE_FIELDS[self.type]
        for spec in self.specs:
            self.fields[spec.name] = self._field(spec, cel_url, spec.name)
        self.row_key, self.row_specs = ROW_KINDS.get(self.type, ("", ()))
        existing = list(_get(self.original or {}, self.row_key) or []) if self.row_key else []
        bound_rows = self._bound_row_count() if self.is_bound else 0
        self.row_count = min(ROWS_MAX, max(ROWS_MIN, len(existing) + 1, bound_rows)) if self.row_key else 0
        for i in range(self.row_count):
            for spec in self.row_specs:
                name = f"{self.row_key}_{i}_{spec.key}"
                self.fields[name] = self._field(spec, cel_url, name, required=False)
        if self.original is not None and not self.is_bound:
            self._initial_from(self.original, existing)

    # --- construction ----------------------------------------------------------------------

    def _bound_row_count(self) -> int:
        prefix = f"{self.row_key}_"
        found = [k for k in self.data if k.startswith(prefix)]
        numbers = []
        for key in found:
            try:
                numbers.append(int(key.split("_")[1]))
            except (IndexError, ValueError):
                continue
        return max(numbers, default=-1) + 1

    def _field(self, spec: Spec, cel_url: str, name: str, *, required: bool | None = None) -> forms.Field:
        attrs: dict[str, Any] = {"autocomplete": "off"}
        needed = spec.required if required is None else required
        field: forms.Field
        if spec.kind in ("cel", "template", "longtemplate"):
            attrs.update(
                {
                    "class": "mono",
                    "spellcheck": "false",
                    "hx-post": cel_url,
                    "hx-trigger": "input changed delay:400ms",
                    "hx-target": f"#status-{name}",
                    "hx-swap": "innerHTML",
                    "hx-vals": json.dumps(
                        {"field": name, "variables": spec.variables, "template": "0" if spec.kind == "cel" else "1"}
                    ),
                    "aria-describedby": f"status-{name} help-{name}",
                }
            )
            widget: forms.Widget = (
                forms.Textarea(attrs={**attrs, "rows": 2}) if spec.kind != "template" else forms.TextInput(attrs)
            )
            field = forms.CharField(required=needed, widget=widget, strip=False, max_length=4000)
        elif spec.kind == "choice":
            field = forms.ChoiceField(required=needed, choices=[(c, c) for c in spec.choices])
        elif spec.kind == "bool":
            field = forms.BooleanField(required=False)
        elif spec.kind == "int":
            field = forms.IntegerField(required=needed, min_value=1, max_value=2_147_483_647)
        elif spec.kind in ("step", "steps"):
            attrs.update({"list": "designer-step-ids", "class": "mono"})
            field = forms.CharField(required=needed, max_length=2000, widget=forms.TextInput(attrs))
        else:
            field = forms.CharField(required=needed, max_length=2000, widget=forms.TextInput(attrs))
        field.label = spec.label
        field.help_text = spec.help
        return field

    def _initial_from(self, step: Mapping[str, Any], rows: list[Any]) -> None:
        self.initial["step_id"] = step.get("id", "")
        self.initial["original_id"] = step.get("id", "")
        for spec in self.specs:
            value = _get(step, spec.key)
            if spec.kind == "steps" and isinstance(value, list):
                self.initial[spec.name] = ", ".join(str(v) for v in value)
            elif spec.kind == "bool":
                self.initial[spec.name] = bool(value)
            elif spec.key == "reminders/every" and value is None:
                continue
            elif value is not None:
                self.initial[spec.name] = value if spec.kind == "int" else _text(value)
        for i, row in enumerate(rows[: self.row_count]):
            if not isinstance(row, Mapping):
                continue
            for spec in self.row_specs:
                if row.get(spec.key) is not None:
                    self.initial[f"{self.row_key}_{i}_{spec.key}"] = _text(row.get(spec.key))

    # --- presentation -----------------------------------------------------------------------

    def field_rows(self) -> list[tuple[Spec, forms.BoundField]]:
        return [(spec, self[spec.name]) for spec in self.specs]

    def rows(self) -> list[list[tuple[Spec, forms.BoundField]]]:
        return [
            [(spec, self[f"{self.row_key}_{i}_{spec.key}"]) for spec in self.row_specs] for i in range(self.row_count)
        ]

    @property
    def row_title(self) -> str:
        return {"decisions": "Decisions", "routes": "Routes"}.get(self.row_key, "")

    # --- validation -------------------------------------------------------------------------

    def clean_step_id(self) -> str:
        value = str(self.cleaned_data.get("step_id", "")).strip()
        if not services.STEP_ID.match(value):
            raise forms.ValidationError("Use 1-255 letters, digits, '_', '.', '$' or '-'.")
        return value

    def _check_cel(self, name: str, spec: Spec, value: str) -> None:
        if not value.strip():
            return
        if spec.kind == "cel" or (spec.key == "assignment/value" and self._mode_is_expression()):
            problem = services.check_expression(value, variables=spec.variables)
        elif spec.kind in ("template", "longtemplate"):
            problem = services.check_expression(value, variables=spec.variables, template=True)
        else:
            return
        if problem:
            self.add_error(name, problem)

    def _mode_is_expression(self) -> bool:
        return self.cleaned_data.get("f_assignment__mode") == "expression"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for spec in self.specs:
            value = data.get(spec.name)
            if spec.kind == "duration" and value and not services.is_duration(str(value)):
                self.add_error(spec.name, "Give an ISO-8601 duration such as PT15M, PT2H or P3D.")
            if spec.kind in ("step", "steps") and value:
                for ref in [v.strip() for v in str(value).split(",")] if spec.kind == "steps" else [str(value).strip()]:
                    if not services.STEP_ID.match(ref):
                        self.add_error(spec.name, "Name a step id: letters, digits, '_', '.', '$' or '-'.")
                        break
            if isinstance(value, str):
                self._check_cel(spec.name, spec, value)
        for i in range(self.row_count):
            row = {spec.key: str(data.get(f"{self.row_key}_{i}_{spec.key}") or "") for spec in self.row_specs}
            if not any(v.strip() for v in row.values()):
                continue
            for spec in self.row_specs:
                name = f"{self.row_key}_{i}_{spec.key}"
                value = row[spec.key]
                if spec.kind == "cel":
                    self._check_cel(name, spec, value)
                elif spec.kind == "step" and value and not services.STEP_ID.match(value.strip()):
                    self.add_error(name, "Name a step id.")
            first = self.row_specs[0]
            if self.row_key == "decisions":
                if not row["name"].strip():
                    self.add_error(f"decisions_{i}_name", "A decision needs a name.")
                if not row["next"].strip():
                    self.add_error(f"decisions_{i}_next", "A decision needs a next step.")
            elif not row[first.key].strip() or not row["to"].strip():
                self.add_error(
                    f"routes_{i}_{first.key}" if not row[first.key].strip() else f"routes_{i}_to",
                    "A route needs a condition and a step to go to.",
                )
        if any(spec is NEXT for spec in self.specs) and not data.get(NEXT.name) and not data.get("connect_from"):
            self.add_error(NEXT.name, "Name the step that follows.")
        if self.type == "human-task" and not self._row_values():
            self.add_error(None, "A human task needs at least one decision.")
        fire_at = _get(self.original or {}, "fireAt")
        if self.type == "timer" and not (data.get("f_after") or data.get("f_at") or fire_at):
            self.add_error("f_after", "Give how long to wait, or until when.")
        if self.type == "timer" and data.get("f_after") and data.get("f_at"):
            self.add_error("f_at", "Give either 'Wait for' or 'Until', not both.")
        for delay, leads_to in (("timeout/after", "timeout/next"), ("due/after", "due/next")):
            a, b = "f_" + delay.replace("/", "__"), "f_" + leads_to.replace("/", "__")
            if a in self.fields and bool(data.get(a)) != bool(data.get(b)):
                self.add_error(b if data.get(a) else a, "Give both the delay and where it leads, or neither.")
        return data

    def _row_values(self) -> list[dict[str, str]]:
        rows = []
        for i in range(self.row_count):
            row = {
                spec.key: str(self.cleaned_data.get(f"{self.row_key}_{i}_{spec.key}") or "").strip()
                for spec in self.row_specs
            }
            if any(row.values()):
                rows.append(row)
        return rows

    # --- the step ---------------------------------------------------------------------------

    def to_step(self) -> dict[str, Any]:
        """The step mapping: the edited step's other fields kept, the form's fields written."""
        data = self.cleaned_data
        base = dict(self.original or {}) if (self.original or {}).get("type") == self.type else {}
        step: dict[str, Any] = {"id": data["step_id"], "type": self.type}
        for key, value in base.items():
            if key not in ("id", "type"):
                step[key] = services._deep_copy(value)
        connect = data.get("connect_from") or ""
        for spec in self.specs:
            value = data.get(spec.name)
            if spec.kind == "bool":
                if value:
                    _put(step, spec.key, True)
                else:
                    _drop(step, spec.key)
                continue
            if spec.kind == "steps":
                value = [v.strip() for v in str(value or "").split(",") if v.strip()]
            elif isinstance(value, str):
                value = value.strip()
            if spec.key == "next" and not value and connect in self.slots:
                value = self.slots[connect]  # inserted on an edge: continue where the edge led
            if value in ("", None, []):
                _drop(step, spec.key)
                continue
            for alternative in ALTERNATIVES.get(spec.key.split("/")[-1], ()):
                _drop(step, "/".join([*spec.key.split("/")[:-1], alternative]))
            _put(step, spec.key, value)
        if self.row_key:
            originals = [r for r in (base.get(self.row_key) or []) if isinstance(r, Mapping)]
            rows = []
            for i, row in enumerate(self._row_values()):
                merged = dict(originals[i]) if i < len(originals) else {}
                for spec in self.row_specs:
                    if row[spec.key]:
                        if spec.key == "set":
                            for alternative in ALTERNATIVES["set"]:
                                merged.pop(alternative, None)
                        merged[spec.key] = row[spec.key]
                    else:
                        merged.pop(spec.key, None)
                rows.append(merged)
            if rows:
                step[self.row_key] = rows
            else:
                step.pop(self.row_key, None)
        return step


class DocumentForm(forms.Form):
    """The editor's form: the document and the scope it deploys into."""

    # the compiler refuses a document over MAX_DOCUMENT_SIZE_BYTES (and says so); this only
    # bounds what a forged post makes the server hold
    text = forms.CharField(required=False, strip=False, max_length=1_048_576, widget=forms.Textarea)
    scope = forms.CharField(max_length=255, initial="default")

    def clean_scope(self) -> str:
        value = str(self.cleaned_data.get("scope", "")).strip()
        if not value or any(ord(ch) < 32 or ch == "/" for ch in value):
            raise forms.ValidationError("A scope is non-blank text without '/' or control characters.")
        return value
