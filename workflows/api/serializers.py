"""Serializers of the API: input serializers check the *shape* of a request (types, lengths,
required fields); every semantic check (schemas, versions, states) is the engine's.

Output serializers fix the wire format of DESIGN.md §5 (and document it in OpenAPI); the
data they render comes from ``workflows.queries`` / ``workflows.operations``.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from workflows.definitions.names import SAFE_NAME
from workflows.definitions.store import METADATA_LIMITS
from workflows.engine import bounds
from workflows.jsonvalues import ExactDecoder, ExactEncoder
from workflows.models import RunStatus

NAME = 255  # ids, names, scopes, keys: at most 255 characters everywhere
MAX_AWAIT_SECONDS = 30


class TextField(serializers.CharField):
    """A JSON string: a number or a boolean is refused ("invalid"), as the schema's
    ``type: string`` says, instead of DRF's coercion to its text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


def _name(**kwargs: Any) -> serializers.CharField:
    return TextField(max_length=NAME, **kwargs)


INT_MAX = 2_147_483_647
# What workflows.definitions.store admits, stated in the schema (the store refuses the rest
# with INVALID_ARGUMENT): a definition id of safe characters; a scope that is not blank and
# holds no control character (Unicode Cc) (in a path, no "/" either). Unpaired surrogates are
# refused everywhere and named in no pattern (see bounds.KEY_PATTERN).
DEFINITION_ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": NAME, "pattern": SAFE_NAME.pattern}
_SCOPE_CHAR = r"[^\x00-\x1f\x7f-\x9f]"
_SCOPE_VISIBLE = rf"[^\x00-\x1f\x7f-\x9f{bounds.UNICODE_SPACE}]"
SCOPE_PATTERN = rf"^{_SCOPE_CHAR}*{_SCOPE_VISIBLE}{_SCOPE_CHAR}*$"
SCOPE_SCHEMA = {"type": "string", "minLength": 1, "maxLength": NAME, "pattern": SCOPE_PATTERN}
_PATH_CHAR = r"[^/\x00-\x1f\x7f-\x9f]"
_PATH_VISIBLE = rf"[^/\x00-\x1f\x7f-\x9f{bounds.UNICODE_SPACE}]"
SCOPE_IN_PATH_PATTERN = rf"^{_PATH_CHAR}*{_PATH_VISIBLE}{_PATH_CHAR}*$"
VERSION_SCHEMA = {"type": "integer", "minimum": 1, "maximum": INT_MAX}
# A text that is not blank: one character that is not a space (str.isspace, what DRF's trimming
# removes before it refuses a blank). ``base.ContractSchema`` states it for every text field
# that refuses a blank.
NOT_BLANK_PATTERN = rf"[^{bounds.UNICODE_SPACE}]"


@extend_schema_field(DEFINITION_ID_SCHEMA)
class DefinitionIdField(TextField):
    """A definition id (checked by the store: INVALID_ARGUMENT otherwise)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=NAME, **kwargs)


@extend_schema_field(SCOPE_SCHEMA)
class ScopeField(TextField):
    """A scope (checked by the store: INVALID_ARGUMENT otherwise)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=NAME, **kwargs)


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": NAME, "pattern": bounds.KEY_PATTERN})
class KeyField(TextField):
    """A business key that must name one (not blank, printable): what ``bounds.check_key``
    admits, stated in the schema; the operation refuses anything else (pointer ``/business_key``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=NAME, trim_whitespace=False, **kwargs)


class AnyJSONField(serializers.JSONField):
    """Any JSON value (bounded and checked for depth by the parser and the engine); decimals
    arrive as ``Decimal`` (see ``parsers``) and are kept exact (``workflows.jsonvalues``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("encoder", ExactEncoder)
        kwargs.setdefault("decoder", ExactDecoder)
        super().__init__(**kwargs)


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "additionalProperties": False,
        "properties": {
            name: {"type": "string", "maxLength": limit, "nullable": True} for name, limit in METADATA_LIMITS.items()
        },
    }
)
class MetadataField(AnyJSONField):
    """Source attribution: an object of the known fields (the serializer refuses another value,
    the store an unknown field)."""


# --- input -----------------------------------------------------------------------------------


class StartRunInput(serializers.Serializer):
    definition_id = DefinitionIdField()
    version = serializers.IntegerField(min_value=1, max_value=2_147_483_647, required=False, allow_null=True)
    scope = ScopeField(required=False, allow_null=True)
    business_key = _name(required=False, allow_blank=True, allow_null=True, trim_whitespace=False)
    payload = AnyJSONField(required=False, allow_null=True)


class SignalInput(serializers.Serializer):
    name = _name()
    payload = AnyJSONField(required=False, allow_null=True)
    branch = _name(required=False, allow_null=True, allow_blank=True)


class SignalByKeyInput(SignalInput):
    """A signal addressed by definition and business key instead of the run's id."""

    definition_id = DefinitionIdField()
    scope = ScopeField(required=False, allow_null=True)
    business_key = KeyField()


class SignalWithStartInput(SignalByKeyInput):
    """Signal-with-start: the signal, and the start of a run for the key when none is open."""

    version = serializers.IntegerField(min_value=1, max_value=2_147_483_647, required=False, allow_null=True)
    start_payload = AnyJSONField(required=False, allow_null=True)


class CancelInput(serializers.Serializer):
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, allow_null=True)


class MigrateInput(serializers.Serializer):
    target_version = serializers.IntegerField(min_value=1, max_value=2_147_483_647)
    target_scope = ScopeField(required=False, allow_null=True)
    target_step = _name(required=False, allow_null=True)
    action = serializers.ChoiceField(choices=["move", "cancel", "end"], required=False, default="move")


class AssignmentField(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["user", "group", "role"])
    value = _name()


class CompleteTaskInput(serializers.Serializer):
    decision = _name()
    payload = AnyJSONField(required=False, allow_null=True)
    expected_assignment = AssignmentField(required=False, allow_null=True)
    subject_version = serializers.CharField(max_length=NAME, required=False, allow_null=True, allow_blank=True)


ASSIGNMENT_SCHEMA = {
    "type": "object",
    "required": ["mode", "value"],
    "properties": {
        "mode": {"type": "string", "enum": ["user", "group", "role"]},
        "value": {"type": "string", "minLength": 1, "maxLength": NAME, "pattern": NOT_BLANK_PATTERN},
    },
}
# ReassignTaskInput as the schema states it: one of the two shapes, never both
REASSIGN_SCHEMA = {
    "oneOf": [
        {
            "type": "object",
            "title": "NestedAssignment",
            "required": ["assignment"],
            "properties": {"assignment": ASSIGNMENT_SCHEMA},
            "not": {"anyOf": [{"required": ["mode"]}, {"required": ["value"]}]},
        },
        {**ASSIGNMENT_SCHEMA, "title": "FlatAssignment", "not": {"required": ["assignment"]}},
    ]
}


class ReassignTaskInput(serializers.Serializer):
    """The new assignment: ``{"assignment": {"mode", "value"}}`` or ``{"mode", "value"}``
    (``REASSIGN_SCHEMA`` in OpenAPI)."""

    assignment = AssignmentField(required=False)
    mode = serializers.ChoiceField(choices=["user", "group", "role"], required=False)
    value = _name(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        nested = attrs.get("assignment")
        if nested is not None:
            if "mode" in attrs or "value" in attrs:
                raise serializers.ValidationError(
                    {"assignment": ["give the assignment either nested or as mode and value, not both"]}, code="both"
                )
            return {"mode": nested["mode"], "value": nested["value"]}
        missing = {k: ["This field is required."] for k in ("mode", "value") if k not in attrs}
        if missing:
            raise serializers.ValidationError(missing, code="required")
        return {"mode": attrs["mode"], "value": attrs["value"]}


class LoadDefinitionInput(serializers.Serializer):
    scope = ScopeField(required=False, default="default")
    format = serializers.ChoiceField(choices=["yaml", "json"], required=False, default="yaml")
    text = serializers.CharField(trim_whitespace=False)
    metadata = MetadataField(
        required=False,
        allow_null=True,
        help_text="source attribution: source_type, source_uri, source_revision, source_author, upload_id (strings)",
    )

    def validate_metadata(self, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise serializers.ValidationError("must be an object", code="not_a_dict")
        return value


class ActivateInput(serializers.Serializer):
    version = serializers.IntegerField(min_value=1, max_value=2_147_483_647)
    target_scope = ScopeField(required=False, allow_null=True)


class AwaitQuery(serializers.Serializer):
    await_ = serializers.FloatField(min_value=0, max_value=MAX_AWAIT_SECONDS, required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        raw = {"await_": data.get("await")} if "await" in data else {}
        try:
            return super().to_internal_value(raw)
        except serializers.ValidationError as exc:
            # the query parameter is called "await" (a Python keyword)
            detail = exc.detail
            if isinstance(detail, dict) and "await_" in detail:
                detail = {"await": detail["await_"]}
            raise serializers.ValidationError(detail) from None


class DefinitionFilters(serializers.Serializer):
    scope = ScopeField(required=False, validators=[RegexValidator(SCOPE_PATTERN, "not a scope")])
    definition_id = DefinitionIdField(required=False, validators=[RegexValidator(SAFE_NAME, "not a definition id")])
    status = serializers.ChoiceField(
        choices=["CANDIDATE", "PUBLISHING", "AVAILABLE", "DEPRECATED", "RETIRED"], required=False
    )


class ActivationFilters(serializers.Serializer):
    scope = ScopeField(required=False, validators=[RegexValidator(SCOPE_PATTERN, "not a scope")])


# --- output ----------------------------------------------------------------------------------


class CommandOut(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    run = serializers.UUIDField()
    kind = serializers.CharField()
    status = serializers.CharField()
    seq = serializers.IntegerField(allow_null=True)


class KeyedSignalOut(serializers.Serializer):
    """The answer of a signal by business key: the run, whether the call started it (and the
    START it recorded), and the SIGNAL."""

    run = serializers.UUIDField()
    started = serializers.BooleanField()
    start = CommandOut(allow_null=True)
    signal = CommandOut()


class SubjectOut(serializers.Serializer):
    type = serializers.CharField()
    id = serializers.CharField()
    version = serializers.CharField()


class FailureOut(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class WaitOut(serializers.Serializer):
    kind = serializers.CharField()
    step = serializers.CharField()
    branch = serializers.CharField(allow_null=True)
    since = serializers.DateTimeField()


class RunOut(serializers.Serializer):
    id = serializers.UUIDField()
    definition_id = serializers.CharField()
    version = serializers.IntegerField()
    scope = serializers.CharField()
    start_scope = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    current_step = serializers.CharField(allow_null=True)
    state = AnyJSONField(allow_null=True)
    state_version = serializers.IntegerField()
    business_key = serializers.CharField(allow_blank=True)
    subject = SubjectOut(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    failure = FailureOut(allow_null=True)
    waits = WaitOut(many=True)


class ActorOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["USER", "SERVICE", "SYSTEM", "NONE"])
    id = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=["VERIFIED", "ABSENT", "DEGRADED"])


class HistoryEntryOut(serializers.Serializer):
    seq = serializers.IntegerField()
    type = serializers.CharField()
    at = serializers.DateTimeField()
    actor = ActorOut()
    command = serializers.IntegerField(allow_null=True)
    step = serializers.CharField(allow_null=True)
    outcome = serializers.CharField(allow_null=True)
    state_version_before = serializers.IntegerField(allow_null=True)
    state_version_after = serializers.IntegerField(allow_null=True)
    patch = AnyJSONField(allow_null=True)
    payload = AnyJSONField(allow_null=True)


class AssignmentOut(serializers.Serializer):
    mode = serializers.CharField()
    value = serializers.CharField()


class DecisionOut(serializers.Serializer):
    name = serializers.CharField()
    schema = AnyJSONField(allow_null=True)


class TaskOut(serializers.Serializer):
    id = serializers.UUIDField()
    run = serializers.UUIDField()
    step = serializers.CharField()
    title = serializers.CharField(allow_blank=True)
    status = serializers.CharField()
    assignment = AssignmentOut()
    decisions = DecisionOut(many=True)
    due_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class DefinitionOut(serializers.Serializer):
    scope = serializers.CharField()
    definition_id = serializers.CharField()
    version = serializers.IntegerField()
    status = serializers.CharField()
    plan_hash = serializers.CharField()


class ActivationOut(serializers.Serializer):
    scope = serializers.CharField()
    definition_id = serializers.CharField()
    target_scope = serializers.CharField()
    version = serializers.IntegerField()
    updated_at = serializers.DateTimeField(allow_null=True)
    updated_by = serializers.CharField(allow_blank=True)


class ViolationOut(serializers.Serializer):
    pointer = serializers.CharField(allow_blank=True, help_text="RFC 6901 pointer into the request body")
    type = serializers.CharField()
    message = serializers.CharField()
    line = serializers.IntegerField(required=False, help_text="the document line (definition documents)")
    column = serializers.IntegerField(
        required=False, help_text="the 1-based column on that line (definition documents: a YAML error, a CEL problem)"
    )
    expressionColumn = serializers.IntegerField(  # the JSON member's name
        required=False, help_text="the 1-based character of the CEL expression where its problem is"
    )


class ProblemOut(serializers.Serializer):
    """RFC 9457 problem details with a stable ``code`` and value-free ``violations``."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    code = serializers.CharField(help_text="stable reason code, e.g. INVALID_PAYLOAD, LOCK_TIMEOUT")
    detail = serializers.CharField()
    violations = ViolationOut(many=True)


# --- representations -------------------------------------------------------------------------


def task_dict(task: Any) -> dict[str, Any]:
    return {
        "id": task.id,
        "run": task.run_id,
        "step": task.step,
        "title": task.title,
        "status": task.status,
        "assignment": {"mode": task.assignment_mode, "value": task.assignment_value},
        "decisions": [{"name": d.get("name", ""), "schema": d.get("schema")} for d in (task.decisions or [])],
        "due_at": task.due_at,
        "created_at": task.created_at,
    }


def history_dict(entry: Any) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "type": entry.type,
        "at": entry.at,
        "actor": {"kind": entry.actor_kind, "id": entry.actor_id or None, "status": entry.attribution_status},
        "command": entry.command_id,
        "step": entry.step or None,
        "outcome": entry.outcome or None,
        "state_version_before": entry.state_version_before,
        "state_version_after": entry.state_version_after,
        "patch": entry.patch,
        "payload": entry.payload,
    }
