"""What every endpoint of the integration API is built from, in this package and in other
apps (capture's ``/api/v1/captures/``): the view class with its authentication, parsers,
renderer and capability permissions, input validation, cursor pages and the problem+json
responses of the OpenAPI schema.

Other apps import this module and nothing else of ``workflows.api`` (import-linter contract
"Capture and designer use only ..." in ``pyproject.toml``), so the endpoints' internals
(``views``, ``serializers``, ``urls``) can change without reaching into them. ``Cursor`` and
``requires`` live in ``pagination`` and ``permissions`` with their siblings and are offered
here as part of that surface.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.validators import RegexValidator
from django.http import HttpRequest, QueryDict
from django.http.response import HttpResponseBase
from django.utils import translation
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.authentication import TokenAuthentication as DRFTokenAuthentication
from rest_framework.exceptions import ErrorDetail
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.views import APIView

from workflows.api import parsers
from workflows.api.errors import PROBLEM_CONTENT_TYPE, escape_pointer_token
from workflows.api.filters import refuse_unknown
from workflows.api.pagination import MAX_PAGE_SIZE, PAGE_SIZE, Cursor
from workflows.api.permissions import requires
from workflows.api.renderers import ExactJSONRenderer
from workflows.api.serializers import NOT_BLANK_PATTERN, ProblemOut
from workflows.exceptions import InvalidPayload, Violation

__all__ = [
    "BODY",
    "PAGE",
    "ApiView",
    "Cursor",
    "TokenAuthentication",
    "errors",
    "query",
    "refuse_unknown",
    "requires",
    "valid",
]

# --- OpenAPI: problem responses and page parameters --------------------------------------------

_ERROR_TEXT = {
    400: "INVALID_PAYLOAD (shape, bounds, schema; with pointers; a query string with a NUL character) "
    "or INVALID_ARGUMENT",
    401: "NOT_AUTHENTICATED / AUTHENTICATION_FAILED: no or a wrong token or session",
    403: "PERMISSION_DENIED: the caller lacks the model permission",
    404: "not found (NOT_FOUND, INSTANCE_NOT_FOUND, TASK_NOT_FOUND, DEFINITION_MISSING)",
    406: "NOT_ACCEPTABLE: the API answers JSON",
    409: "conflict (IDEMPOTENCY_CONFLICT, SIGNAL_REJECTED, TASK_NOT_WAITING, INVALID_TRANSITION, ...)",
    412: "STATE_VERSION_MISMATCH: If-Match names another state version than the run's",
    413: "PAYLOAD_TOO_LARGE: the body is larger than the server accepts",
    415: "UNSUPPORTED_MEDIA_TYPE: send application/json",
    422: "unprocessable (NO_CURRENT_VERSION, VERSION_NOT_RUNNABLE, DEFINITION_INVALID, ...)",
    429: "THROTTLED (with Retry-After) or SIGNAL_LIMIT",
    503: "LOCK_TIMEOUT or PERSISTENCE: retry after Retry-After seconds",
}
_ALWAYS = (400, 401, 403, 406, 429)  # 400: any query string can carry a NUL character
BODY = (400, 413, 415)  # the statuses of an endpoint that reads a body


def errors(*codes: int, **text: str) -> dict[Any, Any]:
    """problem+json responses for the given statuses (plus the ones every endpoint has)."""
    out: dict[Any, Any] = {}
    for code in sorted({*codes, *_ALWAYS}):
        description = text.get(f"e{code}", _ERROR_TEXT[code])
        out[(code, PROBLEM_CONTENT_TYPE)] = OpenApiResponse(ProblemOut, description=description)
    return out


# extend_schema(extensions=BODY_REQUIRED) on an operation whose body is a raw schema (``oneOf``):
# drf-spectacular marks only a serializer's body required; ``postprocess`` does it for these.
BODY_REQUIRED = {"x-switchyard-body-required": True}


def postprocess(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A POSTPROCESSING_HOOK of the schema view (``workflows/api/urls.py``): BODY_REQUIRED."""
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and operation.pop("x-switchyard-body-required", False):
                operation["requestBody"]["required"] = True
    return result


PAGE = [
    OpenApiParameter("cursor", OpenApiTypes.STR, description="the opaque cursor of a next/previous link"),
    OpenApiParameter(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
        description=f"results per page (default {PAGE_SIZE})",
    ),
]


class ContractSchema(AutoSchema):
    """drf-spectacular's AutoSchema, with two refusals of DRF's fields stated in the request
    components and query parameters it derives from serializers (the schema is the contract:
    a request it admits is accepted):

    - a text field that refuses a blank (``allow_blank=False``) refuses a text of spaces alone
      too, for DRF trims it first: ``minLength: 1`` says too little, a pattern asks for one
      character that is not a space (``NOT_BLANK_PATTERN``); a field with a pattern of its own
      keeps it (``tests/api/test_contract.py`` checks that it refuses spaces too);
    - a list or object field with ``allow_empty=False`` refuses an empty one: ``minItems`` /
      ``minProperties`` 1.
    """

    def _map_serializer_field(self, field: Any, direction: Any, bypass_extensions: bool = False) -> Any:
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction != "request" or not isinstance(schema, dict) or getattr(field, "read_only", False):
            return schema
        kind = schema.get("type")
        if isinstance(field, serializers.CharField) and not field.allow_blank and kind == "string":
            stated = {"pattern", "enum", "format"} & set(schema)
            if not stated and not any(isinstance(v, RegexValidator) for v in field.validators):
                schema["pattern"] = NOT_BLANK_PATTERN
        elif getattr(field, "allow_empty", True) is False and kind in ("array", "object"):
            key = "minItems" if kind == "array" else "minProperties"
            schema[key] = max(schema.get(key, 0), 1)
        return schema


# --- the view class --------------------------------------------------------------------------


class TokenAuthentication(DRFTokenAuthentication):
    """DRF's token authentication, with a token that no stored key can equal (a NUL
    character, an unpaired surrogate) refused as a wrong token (401) before the look-up:
    PostgreSQL refuses such text with an error, not with "no row"."""

    def authenticate_credentials(self, key: str) -> Any:
        if parsers.bad_text(key):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)


class ApiView(APIView):
    schema = ContractSchema()
    # Token first: an unauthenticated request is answered 401 with WWW-Authenticate (DRF takes
    # the header from the first class; session authentication has none and would make it 403).
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    parser_classes = [parsers.BoundedJSONParser]
    renderer_classes = [ExactJSONRenderer]
    permission_classes: list[type[BasePermission]] = [IsAuthenticated]
    read_permission: type[BasePermission] | None = None
    write_permission: type[BasePermission] | None = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        # the API answers in English whatever the Accept-Language: its titles and details sit
        # next to stable machine-readable codes (a contract); only the browser pages translate
        with translation.override("en"):
            response = super().dispatch(request, *args, **kwargs)
        response.headers["Content-Language"] = "en"
        return response

    def get_permissions(self) -> list[BasePermission]:
        chosen = self.read_permission if self.request.method in SAFE_METHODS else self.write_permission
        return [IsAuthenticated(), *([chosen()] if chosen else [])]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # a NUL character or an unpaired surrogate can reach no column: refuse the query as
        # a body with one is refused (400, value-free), before any filter sends it to PostgreSQL
        # the same for path segments (a scope or definition id in the URL may be %00)
        for name, value in self.kwargs.items():
            if isinstance(value, str) and parsers.bad_text(value):
                message = "contains a NUL character or an unpaired surrogate"
                raise InvalidPayload(
                    "the path must not contain NUL characters or unpaired surrogates",
                    violations=[
                        Violation(pointer=f"/path/{escape_pointer_token(name)}", type="encoding", message=message)
                    ],
                )
        for name, values in request.query_params.lists():
            if parsers.bad_text(name) or any(parsers.bad_text(v) for v in values):
                pointer = "" if parsers.bad_text(name) else f"/query/{escape_pointer_token(name)}"
                message = "contains a NUL character or an unpaired surrogate"
                raise InvalidPayload(
                    "query parameters must not contain NUL characters or unpaired surrogates",
                    violations=[Violation(pointer=pointer, type="encoding", message=message)],
                )


def query(request: Request, filters: type[serializers.Serializer]) -> dict[str, Any]:
    """A list's query parameters read by ``filters``: a parameter it does not declare (besides
    ``cursor`` and ``page_size``) or a value it refuses is 400 INVALID_PAYLOAD, never ignored."""
    refuse_unknown(request, filters().fields)
    return valid(filters, request.query_params)


def valid(serializer_class: type[serializers.Serializer], data: Any, *, partial: bool = False) -> dict[str, Any]:
    """The validated data of ``data`` (a DRF ValidationError, shaped as INVALID_PAYLOAD, otherwise).

    A JSON body's values must have the JSON types the schema states for its fields
    (``json_type_errors``): DRF's fields would read ``0`` as the text "0", ``"1"`` as an
    integer and ``1`` or ``"yes"`` as true, accepting what the schema refuses. Query
    parameters (a ``QueryDict``) are text and read as DRF reads them."""
    serializer = serializer_class(data=data, partial=partial)
    if not isinstance(data, QueryDict) and isinstance(data, dict):
        errors = json_type_errors(serializer.fields, data)
        if errors:
            raise serializers.ValidationError(errors)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


_TEXT_FIELDS = (
    serializers.CharField,
    serializers.ChoiceField,
    serializers.UUIDField,
    serializers.DateTimeField,
    serializers.DateField,
    serializers.TimeField,
    serializers.DurationField,
)


def _type_error(field: Any, value: Any) -> Any:
    """What ``field`` says of a JSON value of the wrong type (None: the type fits, or the field
    reads any JSON); nested serializers and lists are checked item by item."""
    if isinstance(field, serializers.BaseSerializer):
        if isinstance(field, serializers.ListSerializer):
            if not isinstance(value, list):
                return None  # the serializer refuses it itself
            items = [_type_error(field.child, item) or {} for item in value]
            return items if any(items) else None
        if isinstance(field, serializers.Serializer) and isinstance(value, dict):
            return json_type_errors(field.fields, value) or None
        return None
    if isinstance(field, serializers.MultipleChoiceField):
        return None
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return None
        items = [_type_error(field.child, item) or {} for item in value]
        return items if any(items) else None
    if isinstance(field, serializers.BooleanField):
        fits, message = isinstance(value, bool), "must be true or false"
    elif isinstance(field, serializers.IntegerField):
        fits, message = isinstance(value, int | Decimal) and not isinstance(value, bool), "must be an integer"
    elif isinstance(field, serializers.FloatField | serializers.DecimalField):
        fits, message = isinstance(value, int | float | Decimal) and not isinstance(value, bool), "must be a number"
    elif isinstance(field, _TEXT_FIELDS):
        fits, message = isinstance(value, str), "must be a string"
    else:
        return None  # JSONField, DictField, a field of its own: they read what they document
    if fits or value is None:  # null: the field's allow_null decides
        return None
    return [ErrorDetail(message, code="invalid")]


def json_type_errors(fields: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Per field of ``fields`` given in ``data``, the values whose JSON type is not the one the
    schema states for it (DRF's error detail shape, for the problem's pointers)."""
    errors = {}
    for name, field in fields.items():
        if field.read_only or name not in data:
            continue
        error = _type_error(field, data[name])
        if error:
            errors[name] = error
    return errors
