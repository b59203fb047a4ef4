"""Forms of the designer: the step form (add or edit a step of any type) and the deploy form.

The step form is built from :data:`TYPE_FIELDS`, one list of fields per step type, as each step
type declares them (``StepType.form_fields`` in ``workflows.definitions.steps``; the table in
``docs/authoring.md``). Its values become a step mapping (:meth:`StepForm.to_step`) that
``services.apply_step`` writes into the document. Fields the form does not show (a decision's
payload schema, a callback name, ...) are kept from the step being edited. CEL fields and
templates are compiled with the variables their field provides, as typed (through the
``switchyard_designer:cel`` endpoint) and again when the form is submitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django import forms
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from designer import services
from workflows import jsonvalues
from workflows.definitions.steps import REGISTRY, FormField
from workflows.definitions.steps.base import NEXT_FIELD

# the palette: (type, "Signal wait — wait for a signal"), in the registry's order
STEP_TYPES = tuple((name, kind.palette) for name, kind in REGISTRY.items())
TYPE_NAMES = list(REGISTRY)
ROWS_MIN = 3  # empty rows offered for decisions and routes
ROWS_MAX = 20
# each step type declares its fields, and its repeated rows (a task's decisions, a decision's routes)
TYPE_FIELDS: dict[str, tuple[FormField, ...]] = {name: kind.form_fields for name, kind in REGISTRY.items()}
ROW_KINDS = {name: kind.form_rows for name, kind in REGISTRY.items() if kind.form_rows is not None}
# Callback spellings a form value replaces (the document may hold only one of the two).
ALTERNATIVES = {
    "payload": ("payloadMapper",),
    "set": ("stateReducer", "mutator", "reducer", "applicator"),
    "message": ("messageFactory",),
    "at": ("fireAt",),
}


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

    step_type = forms.ChoiceField(choices=STEP_TYPES, label=_("Type"))
    step_id = forms.CharField(
        label=_("Step id"),
        max_length=255,
        help_text=_("Letters, digits and _ . $ - ; unique in the document."),
    )
    original_id = forms.CharField(required=False, widget=forms.HiddenInput)
    connect_from = forms.ChoiceField(
        required=False,
        label=_("Connect from"),
        help_text=_("Optional: an exit of an existing step that should lead to this step."),
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
        connect.choices = [("", _("— not connected —"))] + [(k, label) for k, label, _t in slots]
        self.slots = {k: target for k, _label, target in slots}
        cel_url = reverse("switchyard_designer:cel")
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

    def _field(self, spec: FormField, cel_url: str, name: str, *, required: bool | None = None) -> forms.Field:
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

    def field_rows(self) -> list[tuple[FormField, forms.BoundField]]:
        return [(spec, self[spec.name]) for spec in self.specs]

    def rows(self) -> list[list[tuple[FormField, forms.BoundField]]]:
        return [
            [(spec, self[f"{self.row_key}_{i}_{spec.key}"]) for spec in self.row_specs] for i in range(self.row_count)
        ]

    @property
    def row_title(self) -> str:
        return str({"decisions": _("Decisions"), "routes": _("Routes")}.get(self.row_key, ""))

    # --- validation -------------------------------------------------------------------------

    def clean_step_id(self) -> str:
        value = str(self.cleaned_data.get("step_id", "")).strip()
        if not services.STEP_ID.match(value):
            raise forms.ValidationError(_("Use 1-255 letters, digits, '_', '.', '$' or '-'."))
        return value

    def _check_cel(self, name: str, spec: FormField, value: str) -> None:
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
                self.add_error(spec.name, _("Give an ISO-8601 duration such as PT15M, PT2H or P3D."))
            if spec.kind in ("step", "steps") and value:
                for ref in [v.strip() for v in str(value).split(",")] if spec.kind == "steps" else [str(value).strip()]:
                    if not services.STEP_ID.match(ref):
                        self.add_error(spec.name, _("Name a step id: letters, digits, '_', '.', '$' or '-'."))
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
                    self.add_error(name, _("Name a step id."))
            first = self.row_specs[0]
            if self.row_key == "decisions":
                if not row["name"].strip():
                    self.add_error(f"decisions_{i}_name", _("A decision needs a name."))
                if not row["next"].strip():
                    self.add_error(f"decisions_{i}_next", _("A decision needs a next step."))
            elif not row[first.key].strip() or not row["to"].strip():
                self.add_error(
                    f"routes_{i}_{first.key}" if not row[first.key].strip() else f"routes_{i}_to",
                    _("A route needs a condition and a step to go to."),
                )
        if (
            any(spec is NEXT_FIELD for spec in self.specs)
            and not data.get(NEXT_FIELD.name)
            and not data.get("connect_from")
        ):
            self.add_error(NEXT_FIELD.name, _("Name the step that follows."))
        if self.type == "human-task" and not self._row_values():
            self.add_error(None, _("A human task needs at least one decision."))
        fire_at = _get(self.original or {}, "fireAt")
        if self.type == "timer" and not (data.get("f_after") or data.get("f_at") or fire_at):
            self.add_error("f_after", _("Give how long to wait, or until when."))
        if self.type == "timer" and data.get("f_after") and data.get("f_at"):
            self.add_error("f_at", _("Give either 'Wait for' or 'Until', not both."))
        for delay, leads_to in (("timeout/after", "timeout/next"), ("due/after", "due/next")):
            a, b = "f_" + delay.replace("/", "__"), "f_" + leads_to.replace("/", "__")
            if a in self.fields and bool(data.get(a)) != bool(data.get(b)):
                self.add_error(b if data.get(a) else a, _("Give both the delay and where it leads, or neither."))
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
            raise forms.ValidationError(_("A scope is non-blank text without '/' or control characters."))
        return value
