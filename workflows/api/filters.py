"""Search on the list endpoints (issue #31): which query parameters each list takes, how a
value is read and what it selects, as django-filter FilterSets.

A list answers what it was asked or says why not: a value that does not read (a status that
does not exist, a version out of range, an instant without a date, a ``state`` that is not a
JSON object) and a parameter the list does not know are ``400 INVALID_PAYLOAD`` with a
violation at ``/<name>`` (as the list filters always answered) that never repeats the value. A misspelt filter would
otherwise be ignored and answer every run.

``state`` is JSON containment (``state @> {...}``) read with the exact-decimal JSON of
``workflows.jsonvalues``, served by the GIN (``jsonb_path_ops``) index ``workflow_run_state``.
Instants are ISO 8601; one without an offset is UTC (the site's ``TIME_ZONE``). ``ordering``
is validated here and applied by the cursor (``pagination.RunCursor``), which must know the
order it pages in.

The OpenAPI parameters of each FilterSet (``parameters``) come from the same declarations,
so the schema and the filters cannot drift apart.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import django_filters as df
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from workflows import jsonvalues
from workflows.api.pagination import PAGE_PARAMETERS, RunCursor
from workflows.api.serializers import NOT_BLANK_PATTERN
from workflows.exceptions import InvalidPayload, Violation
from workflows.models import Run, RunStatus, Task, TaskStatus

NAME = 255  # the longest name column (definition id, step, business key, ...)
MAX_STATE_CHARS = 4096  # a containment document longer than this is no search
INT_MAX = 2_147_483_647
PARAMETER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # what an unknown parameter's name is repeated as

# value-free words for the form errors a filter can raise, by error code
MESSAGES = {
    "invalid_choice": "not one of the allowed values",
    "min_value": "out of range",
    "max_value": "out of range",
    "max_length": "too long",
    "json": "must be a JSON object",
    "instant": "must be an ISO 8601 instant",
}


def refuse_unknown(request: Request, known: Iterable[str]) -> None:
    """400 for a query parameter the list does not take: each one named when it looks like a
    parameter name (a misspelling to fix), otherwise not repeated (pointer ``""``); 400 too for
    a known parameter given blank (``?status=``, or spaces alone, which the forms trim to
    nothing), which would otherwise filter nothing."""
    unknown = sorted(set(request.query_params) - {*known, *PAGE_PARAMETERS})
    blank = sorted(
        name
        for name, values in request.query_params.lists()
        if any(not value.strip() for value in values)
        and name not in unknown
        and name not in PAGE_PARAMETERS  # those answer their own 400
    )
    if blank:
        # ?status= would otherwise read as "no filter": a client that sent a parameter meant
        # something by it (the schema says minLength 1 / a format / an enum)
        raise InvalidPayload(
            "blank query parameters",
            violations=[Violation(pointer=f"/{name}", type="blank", message="must not be blank") for name in blank],
        )
    if unknown:
        raise InvalidPayload(
            "unknown query parameters",
            violations=[
                Violation(
                    pointer=f"/{name}" if PARAMETER_NAME.fullmatch(name) else "",
                    type="unknown",
                    message="not a parameter of this list",
                )
                for name in unknown
            ],
        )


# --- form fields ---------------------------------------------------------------------------------


class JSONObjectField(forms.Field):
    """A JSON object, decimals exact (``jsonvalues.loads_input``)."""

    def to_python(self, value: Any) -> dict[str, Any] | None:
        text = str(value or "").strip()
        if not text:
            return None
        try:
            parsed = jsonvalues.loads_input(text) if len(text) <= MAX_STATE_CHARS else None
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            raise ValidationError(MESSAGES["json"], code="json")
        return parsed


class InstantField(forms.Field):
    """An ISO 8601 date and time, aware (UTC when no offset is given)."""

    def to_python(self, value: Any) -> datetime.datetime | None:
        text = str(value or "").strip()
        if not text:
            return None
        try:
            instant = parse_datetime(text)
            if instant is not None and timezone.is_naive(instant):
                instant = timezone.make_aware(instant, datetime.UTC)
            instant = instant.astimezone(datetime.UTC) if instant is not None else None
        except (ValueError, OverflowError):
            instant = None
        if instant is None:
            raise ValidationError(MESSAGES["instant"], code="instant")
        return instant


# --- filters -------------------------------------------------------------------------------------


class NameFilter(df.CharFilter):
    """Equal to a name (exact)."""

    def __init__(self, field_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(field_name=field_name, max_length=NAME, **kwargs)


class IntegerFilter(df.Filter):
    field_class = forms.IntegerField


class InstantFilter(df.Filter):
    field_class = InstantField


class StatusFilter(df.MultipleChoiceFilter):
    """One or more statuses (the parameter repeated); ``default`` when none is given."""

    def __init__(self, *args: Any, default: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, distinct=False, **kwargs)
        self.default = tuple(default)

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        chosen = sorted(value or self.default)
        return qs.filter(**{f"{self.field_name}__in": chosen}) if chosen else qs


class ContainsFilter(df.Filter):
    """The column's JSON contains this object (``@>``)."""

    field_class = JSONObjectField

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        return qs if value is None else qs.filter(**{f"{self.field_name}__contains": value})


def _ordered_by_the_cursor(queryset: QuerySet[Any], name: str, value: Any) -> QuerySet[Any]:
    return queryset  # validated here; RunCursor.get_ordering applies it


# --- the lists -----------------------------------------------------------------------------------


class Search(df.FilterSet):
    """A FilterSet that refuses what it cannot read, value-free (see the module docstring)."""

    @classmethod
    def search(cls, request: Request, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """``queryset`` narrowed by the request's query parameters (400 for an unknown one or a bad value)."""
        refuse_unknown(request, cls.base_filters)
        found = cls(request.query_params, queryset=queryset, request=request)
        if not found.is_valid():
            violations = [
                Violation(
                    pointer=f"/{name}",
                    type=error.code or "invalid",
                    message=MESSAGES.get(error.code or "", "not a valid value"),
                )
                for name, errors in sorted(found.form.errors.as_data().items())
                for error in errors
            ]
            raise InvalidPayload("invalid query parameters", violations=violations)
        return found.qs


class RunSearch(Search):
    status = StatusFilter(choices=RunStatus.choices, help_text="one or more run statuses (repeat the parameter)")
    definition_id = NameFilter()
    version = IntegerFilter(min_value=1, max_value=INT_MAX)
    scope = NameFilter()
    step = NameFilter("current_step", help_text="the run's current step")
    business_key = NameFilter()
    subject_type = df.CharFilter(max_length=64)
    subject_id = NameFilter()
    state = ContainsFilter(help_text='a JSON object the run\'s state contains, e.g. {"region":"EU"} (JSON containment)')
    created_after = InstantFilter("created_at", lookup_expr="gte", help_text="created at or after (ISO 8601)")
    created_before = InstantFilter("created_at", lookup_expr="lt", help_text="created before (ISO 8601)")
    updated_after = InstantFilter("updated_at", lookup_expr="gte", help_text="last changed at or after")
    updated_before = InstantFilter("updated_at", lookup_expr="lt", help_text="last changed before")
    ended_after = InstantFilter("ended_at", lookup_expr="gte", help_text="ended at or after")
    ended_before = InstantFilter("ended_at", lookup_expr="lt", help_text="ended before")
    ordering = df.ChoiceFilter(
        choices=[(name, name) for name in RunCursor.orderings],
        method=_ordered_by_the_cursor,
        help_text="the order of the list (default -created_at, newest first)",
    )

    class Meta:
        model = Run
        fields: list[str] = []


class TaskSearch(Search):
    status = StatusFilter(
        choices=TaskStatus.choices,
        default=(TaskStatus.OPEN, TaskStatus.COMPLETING),
        help_text="one or more task statuses (repeat the parameter; default OPEN and COMPLETING)",
    )
    definition_id = NameFilter("run__definition_id", help_text="the definition of the task's run")
    group = NameFilter(method="assigned_to_group", help_text="assigned to this group")
    due_after = InstantFilter("due_at", lookup_expr="gte", help_text="due at or after (ISO 8601)")
    due_before = InstantFilter("due_at", lookup_expr="lt", help_text="due before (ISO 8601)")

    class Meta:
        model = Task
        fields: list[str] = []

    def assigned_to_group(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(assignment_mode="group", assignment_value=value)


# --- OpenAPI -------------------------------------------------------------------------------------


def _schema(item: df.Filter) -> dict[str, Any]:
    field = item.field
    if isinstance(item, df.MultipleChoiceFilter):
        return {"type": "array", "items": {"type": "string", "enum": [c for c, _ in item.extra["choices"]]}}
    if isinstance(item, df.ChoiceFilter):
        return {"type": "string", "enum": [c for c, _ in item.extra["choices"]]}
    if isinstance(field, forms.IntegerField):
        return {"type": "integer", "minimum": field.min_value, "maximum": field.max_value}
    if isinstance(field, InstantField):
        return {"type": "string", "format": "date-time"}
    if isinstance(field, JSONObjectField):
        # "json-object": the text of a JSON object (a format of this API's own, documented in
        # the parameter's description; generators that do not know it treat it as a string)
        return {"type": "string", "format": "json-object", "minLength": 2, "maxLength": MAX_STATE_CHARS}
    # blank (spaces alone too): 400 (refuse_unknown)
    return {"type": "string", "minLength": 1, "maxLength": field.max_length, "pattern": NOT_BLANK_PATTERN}


def parameters(search: type[Search]) -> list[OpenApiParameter]:
    """The query parameters of a FilterSet, typed, for ``extend_schema``."""
    return [
        OpenApiParameter(
            name,
            _schema(item),
            description=str(item.extra.get("help_text", "")),
            explode=True if isinstance(item, df.MultipleChoiceFilter) else None,
        )
        for name, item in search.base_filters.items()
    ]


def object_schema(search: type[Search]) -> dict[str, Any]:
    """The query parameters of a FilterSet as the members of a JSON object (the filter of a
    bulk operation), with the JSON types ``object_parameters`` reads: each as its query
    parameter, a multiple choice also as one value, ``state`` as the object itself; at least
    one member, no other."""
    properties: dict[str, Any] = {}
    for name, item in search.base_filters.items():
        schema = _schema(item)
        if isinstance(item, df.MultipleChoiceFilter):
            schema = {"oneOf": [schema["items"], {**schema, "minItems": 1}]}
        elif isinstance(item, ContainsFilter):
            # an empty object is contained in every state: it would narrow nothing (refused)
            schema = {"type": "object", "minProperties": 1}
        description = str(item.extra.get("help_text", ""))
        properties[name] = {**schema, "description": description} if description else schema
    return {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": properties}


def object_parameters(search: type[Search], name: str, value: Any) -> list[str] | None:
    """A member of such an object as the query string would carry it, if it has the JSON type
    ``object_schema`` states (None otherwise): an integer for an integer filter, a string or a
    list of them for a multiple choice, an object (or its text) for ``state``, a string for the
    others. A name the FilterSet does not know passes as text, for it to refuse as unknown."""
    item = search.base_filters.get(name)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(item, IntegerFilter):
        if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
            value = int(value)
        return [str(value)] if isinstance(value, int) else None
    if isinstance(value, list):
        many = isinstance(item, df.MultipleChoiceFilter | ContainsFilter)  # state: refused as not JSON
        return list(value) if many and value and all(isinstance(v, str) for v in value) else None
    if isinstance(value, dict):
        return [jsonvalues.dumps(value)] if isinstance(item, ContainsFilter) else None
    return [value] if isinstance(value, str) else None
