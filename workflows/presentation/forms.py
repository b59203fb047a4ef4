"""Payload forms generated from a decision's JSON Schema.

A decision's schema (as the task's decision snapshot stores it) becomes a list of
:class:`Field` s, one per property, addressed by RFC 6901 pointer so the engine's violation
pointers land next to the field they are about. The browser posts strings; :func:`parse`
turns them back into JSON values (numbers, booleans, enum members, arrays, dates) and
reports what cannot be read as a value of the declared type. The schema itself is checked by
the engine when the completion is recorded, never here: :func:`parse` only reads input.

Supported: ``string`` (``format: date`` / ``date-time`` / ``email`` / ``uri``, long strings
as a text area), ``number``, ``integer``, ``boolean``, ``enum`` and ``oneOf``-of-``const``
as a select, arrays of simple items (one per line, or checkboxes for an enum), nested
objects as a group. Anything else is edited as JSON text. ``title`` is the label,
``description`` the help text, ``required`` marks the field, ``default`` fills it.

Every message here is composed from the field's schema (a limit, a keyword), never from
what was submitted, so an error page never echoes a value back as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

from workflows import jsonvalues

SIMPLE = ("string", "number", "integer", "boolean")
LONG_TEXT = 120  # strings allowed to be longer than this get a text area
NAME_PREFIX = "payload"


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _type(schema: Mapping[str, Any]) -> str:
    """The schema's (first non-null) type, inferred from ``properties``/``items`` when absent."""
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = next((t for t in declared if t != "null"), None)
    if isinstance(declared, str):
        return declared
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return ""


def _choices(schema: Mapping[str, Any]) -> list[tuple[Any, str]] | None:
    """(value, label) pairs of an ``enum`` or of a ``oneOf``/``anyOf`` made of ``const`` s."""
    if isinstance(schema.get("enum"), list):
        return [(v, _plain(v)) for v in schema["enum"]]
    for key in ("oneOf", "anyOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and all(isinstance(o, Mapping) and "const" in o for o in options):
            return [(o["const"], str(o.get("title") or _plain(o["const"]))) for o in options]
    return None


def _plain(value: Any) -> str:
    if value is True:
        return "Yes"
    if value is False:
        return "No"
    if value is None:
        return "None"
    return str(value)


def humanise(name: str) -> str:
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ").strip()
    return (words[:1].upper() + words[1:]) if words else name


def encode_choice(value: Any) -> str:
    """The option value of an enum member: its JSON, so numbers and booleans keep their type."""
    return jsonvalues.canonical(value)


@dataclass
class Field:
    """One input, addressed by the pointer of the payload member it edits."""

    pointer: str
    name: str  # the form field's name: "payload" + pointer
    label: str
    kind: str  # text textarea email url date datetime number integer checkbox select lines checkboxes json group
    schema: Mapping[str, Any]
    required: bool = False
    help: str = ""
    choices: list[tuple[str, str]] = field(default_factory=list)  # (encoded value, label)
    item_kind: str = ""  # for "lines": the kind of each item
    children: list[Field] = field(default_factory=list)
    value: Any = None  # what the input shows (a string, a bool, a list of encoded choices)
    errors: list[str] = field(default_factory=list)
    form_id: str = ""  # the decision's form, so ids stay unique on a page of several forms

    @property
    def id(self) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", "-", f"f-{self.form_id}-{self.name}")

    @property
    def attrs(self) -> dict[str, Any]:
        """HTML constraint attributes mirroring the schema (the server still decides)."""
        s, out = self.schema, {}
        if self.kind in ("number", "integer"):
            if isinstance(s.get("minimum"), (int, float)):
                out["min"] = s["minimum"]
            if isinstance(s.get("maximum"), (int, float)):
                out["max"] = s["maximum"]
            out["step"] = "1" if self.kind == "integer" else "any"
        # no maxlength attribute: the browser would cut pasted text silently; the hint says
        # the limit and the server explains a violation next to the field
        return out

    @property
    def hint(self) -> str:
        """The schema's limits in words (shown under the label, with the description)."""
        s, parts = self.schema, []
        lo, hi = s.get("minLength"), s.get("maxLength")
        if isinstance(hi, int) and isinstance(lo, int) and lo > 1:
            parts.append(_("%(low)s to %(high)s characters") % {"low": lo, "high": hi})
        elif isinstance(hi, int):
            parts.append(_("up to %(high)s characters") % {"high": hi})
        elif isinstance(lo, int) and lo > 1:
            parts.append(_("at least %(low)s characters") % {"low": lo})
        lo, hi = s.get("minimum"), s.get("maximum")
        if lo is not None and hi is not None:
            parts.append(_("from %(low)s to %(high)s") % {"low": lo, "high": hi})
        elif lo is not None:
            parts.append(_("%(low)s or more") % {"low": lo})
        elif hi is not None:
            parts.append(_("%(high)s or less") % {"high": hi})
        if self.kind == "lines":
            parts.append(_("one per line"))
        if self.kind == "datetime":
            parts.append("UTC")
        text = ", ".join(parts)
        return text[:1].upper() + text[1:] + "." if text else ""

    def walk(self) -> Iterable[Field]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class PayloadForm:
    """The fields of one decision, plus errors that belong to no field."""

    decision: str
    fields: list[Field]
    errors: list[str] = field(default_factory=list)
    takes_payload: bool = True
    _by_pointer: dict[str, Field] | None = field(default=None, repr=False, compare=False)

    def all_fields(self) -> Iterable[Field]:
        for f in self.fields:
            yield from f.walk()

    def field_at(self, pointer: str) -> Field | None:
        """The field whose pointer is the longest segment-wise prefix of ``pointer``: the
        pointer and then its prefixes, looked up in an index of the fields made once (a
        violation per field of a large form would otherwise cost a walk of every field)."""
        if self._by_pointer is None:
            self._by_pointer = {f.pointer: f for f in self.all_fields() if f.kind != "group"}
        at = pointer
        while True:
            found = self._by_pointer.get(at)
            if found is not None:
                return found
            if not at:
                return None
            at = at.rsplit("/", 1)[0] if "/" in at else ""

    @property
    def has_required(self) -> bool:
        return any(f.required for f in self.all_fields())

    @property
    def has_errors(self) -> bool:
        return bool(self.errors) or any(f.errors for f in self.all_fields())


# --- building -----------------------------------------------------------------------------


def build(decision: str, schema: Mapping[str, Any] | None, *, order: Mapping[str, Any] | None = None) -> PayloadForm:
    """The form of a decision. ``order`` is the same schema as the definition wrote it, used
    only for the order of properties (the stored snapshot does not keep key order)."""
    if not schema:
        return PayloadForm(decision=decision, fields=[], takes_payload=False)
    if (
        _type(schema) == "object"
        and isinstance(schema.get("properties"), Mapping)
        and _property_count(schema, MAX_FORM_FIELDS) <= MAX_FORM_FIELDS
    ):
        form = PayloadForm(decision=decision, fields=_object_fields(schema, "", order))
    else:
        # a root that is not an object of known properties, or one with more properties than
        # a page should draw (MAX_FORM_FIELDS): edit it as JSON
        whole = Field(
            pointer="",
            name=NAME_PREFIX,
            label="Details (JSON)",
            kind="json",
            schema=schema,
            required=True,
            help=str(schema.get("description") or ""),
        )
        whole.value = _initial(whole)
        form = PayloadForm(decision=decision, fields=[whole])
    for f in form.all_fields():
        f.form_id = decision
    return form


# The most fields a generated form draws: a schema with more properties (nested ones counted)
# is edited as one JSON field instead. 20,000 properties once took 11.5 s a page.
MAX_FORM_FIELDS = 300


def _property_count(schema: Mapping[str, Any], limit: int) -> int:
    """The properties of ``schema`` and of its nested objects, counted until past ``limit``."""
    count = 0
    stack = [schema]
    while stack and count <= limit:
        properties = stack.pop().get("properties")
        if isinstance(properties, Mapping):
            count += len(properties)
            stack.extend(sub for sub in properties.values() if isinstance(sub, Mapping))
    return count


def _object_fields(schema: Mapping[str, Any], at: str, order: Mapping[str, Any] | None) -> list[Field]:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    hint = list((order or {}).get("properties") or {}) if isinstance(order, Mapping) else []
    position = {name: i for i, name in enumerate(hint)}  # a look-up per name, not a scan
    names = sorted(properties, key=lambda n: (position.get(n, len(hint)), n))
    out = []
    for name in names:
        sub = properties[name]
        if not isinstance(sub, Mapping):
            continue
        sub_order = ((order or {}).get("properties") or {}).get(name) if isinstance(order, Mapping) else None
        out.append(_field(name, sub, f"{at}/{escape(name)}", name in required, sub_order))
    return out


def _field(name: str, schema: Mapping[str, Any], pointer: str, required: bool, order: Any) -> Field:
    kind, item_kind, choices = _kind(schema)
    f = Field(
        pointer=pointer,
        name=NAME_PREFIX + pointer,
        label=str(schema.get("title") or humanise(name)),
        kind=kind,
        schema=schema,
        required=required,
        help=str(schema.get("description") or ""),
        choices=[(encode_choice(v), label) for v, label in choices],
        item_kind=item_kind,
    )
    if kind == "group":
        f.children = _object_fields(schema, pointer, order if isinstance(order, Mapping) else None)
    f.value = _initial(f)
    return f


def _kind(schema: Mapping[str, Any]) -> tuple[str, str, list[tuple[Any, str]]]:
    choices = _choices(schema)
    if choices is not None:
        return "select", "", choices
    t = _type(schema)
    if t == "string":
        fmt = schema.get("format")
        if fmt == "date":
            return "date", "", []
        if fmt == "date-time":
            return "datetime", "", []
        if fmt == "email":
            return "email", "", []
        if fmt in ("uri", "url"):
            return "url", "", []
        limit = schema.get("maxLength")
        return ("textarea" if isinstance(limit, int) and limit > LONG_TEXT else "text"), "", []
    if t in ("number", "integer"):
        return t, "", []
    if t == "boolean":
        return "checkbox", "", []
    if t == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            item_choices = _choices(items)
            if item_choices is not None:
                return "checkboxes", "", item_choices
            item_kind, _, _ = _kind(items)
            if item_kind in ("text", "textarea", "email", "url", "date", "datetime", "number", "integer"):
                return "lines", item_kind, []
        return "json", "", []
    if t == "object" and isinstance(schema.get("properties"), Mapping):
        return "group", "", []
    return "json", "", []


def _initial(f: Field) -> Any:
    """What the input shows before anything was posted: the schema's default, or nothing."""
    default = f.schema.get("default")
    if f.kind == "checkbox":
        return default is True
    if default is None:
        return [] if f.kind == "checkboxes" else ""
    if f.kind == "select":
        return encode_choice(default)
    if f.kind == "checkboxes":
        return [encode_choice(v) for v in default] if isinstance(default, list) else []
    if f.kind == "lines":
        return "\n".join(_plain(v) for v in default) if isinstance(default, list) else ""
    if f.kind == "json":
        return jsonvalues.dumps(default, indent=2, sort_keys=True)
    if f.kind == "datetime" and isinstance(default, str):
        return default.replace("Z", "")[:16]
    return str(default)


# --- reading a post -------------------------------------------------------------------------


class _Unreadable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse(form: PayloadForm, data: Any) -> Any:
    """Read the posted values into a payload; unreadable inputs get an error on their field.

    ``data`` is a ``QueryDict`` (``get``/``getlist``). Answers the payload (``None`` for a
    decision that takes none). Empty optional inputs are left out of the payload, so the
    schema's ``required`` decides about them.
    """
    if not form.takes_payload:
        return None
    if len(form.fields) == 1 and form.fields[0].pointer == "":
        return _read(form.fields[0], data)
    return _read_object(form.fields, data)


def _read_object(fields: list[Field], data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        value = _read(f, data)
        if value is not _MISSING:
            out[unescape(f.pointer.rsplit("/", 1)[-1])] = value
    return out


_MISSING: Any = object()


def _read(f: Field, data: Any) -> Any:
    if f.kind == "group":
        inner = _read_object(f.children, data)
        return inner if inner or f.required else _MISSING
    if f.kind == "checkbox":
        f.value = data.get(f.name) is not None
        return f.value
    if f.kind == "checkboxes":
        raw_list = [str(v) for v in data.getlist(f.name)]
        f.value = raw_list
        allowed = {encoded: i for i, (encoded, _) in enumerate(f.choices)}
        if any(r not in allowed for r in raw_list):
            f.errors.append(_("Choose only from the offered values."))
            return _MISSING
        return [jsonvalues.loads(r) for r in raw_list]
    raw = str(data.get(f.name, ""))
    f.value = raw
    try:
        return _convert(f, raw)
    except _Unreadable as exc:
        f.errors.append(exc.message)
        return _MISSING


def _convert(f: Field, raw: str) -> Any:
    if f.kind == "select":
        if raw == "":
            return _MISSING
        if raw not in {encoded for encoded, _ in f.choices}:
            raise _Unreadable(_("Choose one of the offered values."))
        return jsonvalues.loads(raw)
    if f.kind == "json":
        if raw.strip() == "":
            return _MISSING
        try:
            return jsonvalues.loads_input(raw)
        except jsonvalues.NumberOutOfRange:
            raise _Unreadable(_("Enter numbers that are finite and at most 1e308 in magnitude.")) from None
        except jsonvalues.TooDeep:
            raise _Unreadable(_("Enter JSON that is nested less deeply.")) from None
        except ValueError:
            raise _Unreadable(_("Enter valid JSON.")) from None
    if f.kind == "lines":
        items = [line.strip() for line in raw.splitlines() if line.strip()]
        if not items:
            return _MISSING
        return [_scalar(f.item_kind, item) for item in items]
    if raw.strip() == "":
        return _MISSING
    return _scalar(f.kind, raw)


def _scalar(kind: str, raw: str) -> Any:
    text = raw.strip()
    if kind == "integer":
        if not re.fullmatch(r"[+-]?\d+", text):
            raise _Unreadable(_("Enter a whole number."))
        return int(text)
    if kind == "number":
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise _Unreadable(_("Enter a number.")) from None
        if not number.is_finite():
            raise _Unreadable(_("Enter a number."))
        if jsonvalues.number_problem(number) is not None:
            raise _Unreadable(_("Enter a number of at most 1e308 in magnitude."))
        if number == number.to_integral_value() and "." not in text and "e" not in text.lower():
            return int(number)
        return number  # exact: 1000.10 is kept as 1000.10 (workflows.jsonvalues)
    if kind == "date":
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            raise _Unreadable(_("Enter a date (YYYY-MM-DD).")) from None
    if kind == "datetime":
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise _Unreadable(_("Enter a date and time.")) from None
        if moment.tzinfo is None:  # a datetime-local input: the form says it is UTC
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return raw


# --- errors from the engine -------------------------------------------------------------------


def schema_at(schema: Mapping[str, Any] | None, pointer: str) -> Mapping[str, Any]:
    """The subschema that governs the value at ``pointer`` (properties and items only)."""
    current: Any = schema or {}
    for token in [unescape(t) for t in pointer.split("/")[1:]] if pointer else []:
        if not isinstance(current, Mapping):
            return {}
        props = current.get("properties")
        if isinstance(props, Mapping) and token in props:
            current = props[token]
        elif token.isdigit() and isinstance(current.get("items"), Mapping):
            current = current["items"]
        else:
            return {}
    return current if isinstance(current, Mapping) else {}


def message(violation_type: str, schema: Mapping[str, Any]) -> str:
    """A reader's message for a schema keyword, built from the schema alone."""
    s = schema
    t = violation_type
    if t == "required":
        # a context of its own: DRF, listed before this app, translates the bare text otherwise
        return pgettext("payload form", "This field is required.")
    if t == "maxLength":
        return _("Use at most %(limit)s characters.") % {"limit": s.get("maxLength")}
    if t == "minLength":
        return (
            _("This field cannot be empty.")
            if s.get("minLength") == 1
            else _("Use at least %(limit)s characters.") % {"limit": s.get("minLength")}
        )
    if t == "minimum":
        return _("Enter %(limit)s or more.") % {"limit": s.get("minimum")}
    if t == "maximum":
        return _("Enter %(limit)s or less.") % {"limit": s.get("maximum")}
    if t == "exclusiveMinimum":
        return _("Enter more than %(limit)s.") % {"limit": s.get("exclusiveMinimum")}
    if t == "exclusiveMaximum":
        return _("Enter less than %(limit)s.") % {"limit": s.get("exclusiveMaximum")}
    if t == "multipleOf":
        return _("Enter a multiple of %(step)s.") % {"step": s.get("multipleOf")}
    if t == "pattern":
        return _("This does not have the expected form.")
    if t == "format":
        return _("Enter a valid %(format)s.") % {"format": s.get("format", _("value"))}
    if t in ("enum", "const", "oneOf", "anyOf"):
        return _("Choose one of the offered values.")
    if t == "type":
        wanted = _type(s) or "value"
        return {
            "integer": _("Enter a whole number."),
            "number": _("Enter a number."),
            "boolean": _("Choose yes or no."),
            "string": _("Enter text."),
            "array": _("Enter a list."),
            "object": _("Fill in this group."),
        }.get(wanted, _("This value has the wrong type."))
    if t == "minItems":
        return _give_items("at least", s.get("minItems"))
    if t == "maxItems":
        return _give_items("at most", s.get("maxItems"))
    if t == "uniqueItems":
        return _("Each item may appear only once.")
    if t == "additionalProperties":
        return _("This form has a field the decision does not accept.")
    if t == "payload":
        return _("This decision takes no details.")
    if t == "decision":
        return _("This decision is not offered by this task.")
    return _("This value is not accepted (%(keyword)s).") % {"keyword": t}


def _give_items(bound: str, limit: Any) -> str:
    count = limit if isinstance(limit, int) else 0
    if bound == "at least":
        text = ngettext("Give at least %(count)s item.", "Give at least %(count)s items.", count)
    else:
        text = ngettext("Give at most %(count)s item.", "Give at most %(count)s items.", count)
    return text % {"count": limit}


def attach(form: PayloadForm, schema: Mapping[str, Any] | None, violations: Iterable[Any]) -> None:
    """Put each engine violation (pointer, type) next to the field it is about."""
    for v in violations:
        pointer, vtype = str(getattr(v, "pointer", "")), str(getattr(v, "type", ""))
        if vtype == "decision":
            form.errors.append(message(vtype, {}))
            continue
        target = form.field_at(pointer)
        text = message(vtype, schema_at(schema, pointer))
        if target is None:
            if text not in form.errors:
                form.errors.append(text)
        elif text not in target.errors:
            target.errors.append(text)
