"""One exception handler that shapes every API error as ``application/problem+json``.

Body: ``{"type", "title", "status", "code", "detail", "violations": [{"pointer", "type",
"message"}]}``; a definition document's violations add ``line`` and ``column`` (1-based, where
the author looks in the text) and, for a CEL problem, ``expressionColumn``. ``code`` is stable
(the reference's reason codes for workflow errors, an upper-case name for protocol errors such
as PERMISSION_DENIED). Nothing a caller submitted is
ever repeated: workflow errors carry framework-composed, value-free messages; DRF's own
messages are replaced where their templates quote the input (``"{input}" is not a valid
choice``), and violations name where the problem is (an RFC 6901 pointer), never what was there.

Retryable errors (LOCK_TIMEOUT, PERSISTENCE) answer 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from workflows import operations
from workflows.api.renderers import ExactJSONRenderer
from workflows.engine.db import is_bad_value
from workflows.exceptions import WorkflowError

log = logging.getLogger("workflows.api")

PROBLEM_CONTENT_TYPE = "application/problem+json"
RETRY_AFTER_SECONDS = 1

# DRF error codes whose default message quotes the submitted value: replaced by fixed text.
_QUOTING_CODES = {
    "invalid_choice": "not one of the allowed values",
    "does_not_exist": "no such object",
    "incorrect_type": "wrong type",
    "invalid_pk_value": "no such object",
}


# One title per problem type (``code``; the ``type`` URI is derived from it): the titles of the
# workflow errors (``WorkflowError.title``), of the codes an operation raises with a class of
# another code (``TaskNotWaiting(code="TASK_CLAIMED")``) and of the protocol errors. ``problem``
# answers the title registered for a code, whatever title its caller passed.
PROTOCOL_TITLES = {
    "NOT_AUTHENTICATED": "Authentication required",
    "AUTHENTICATION_FAILED": "Authentication failed",
    "PERMISSION_DENIED": "Permission denied",
    "NOT_FOUND": "Not found",
    "METHOD_NOT_ALLOWED": "Method not allowed",
    "UNSUPPORTED_MEDIA_TYPE": "Unsupported media type",
    "NOT_ACCEPTABLE": "Not acceptable",
    "THROTTLED": "Too many requests",
    "PAYLOAD_TOO_LARGE": "Request body too large",
    "INTERNAL": "Internal error",
}
RAISED_WITH_ANOTHER_CLASS_TITLES = {
    "TASK_CLAIMED": "Task claimed by another member of its group",
    "TASK_NOT_CLAIMABLE": "Task cannot be claimed",
    "VERSION_EXISTS": "Version already exists",
    "LOADER_MISSING": "No loader for the stored document",
    "DRIFT": "Stored definition drifted from its compiled plan",
    "SNAPSHOT_MISSING": "Capture has no snapshot",
}


def _workflow_titles() -> dict[str, str]:
    titles: dict[str, str] = {}
    pending: list[type[WorkflowError]] = [WorkflowError]
    while pending:
        cls = pending.pop()
        titles.setdefault(cls.code, cls.title)
        pending.extend(cls.__subclasses__())
    return titles


def titles() -> dict[str, str]:
    """Every problem code the API answers with its one title (read when asked: apps register
    their WorkflowError subclasses when they are imported)."""
    return {**_workflow_titles(), **RAISED_WITH_ANOTHER_CLASS_TITLES, **PROTOCOL_TITLES}


def title_of(code: str, fallback: str) -> str:
    return titles().get(code, fallback)


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the request body is larger than the server accepts"
    default_code = "payload_too_large"


def problem(
    status_code: int,
    code: str,
    title: str,
    detail: str,
    violations: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = {
        "type": f"urn:switchyard:problem:{code.lower().replace('_', '-')}",
        "title": title_of(code, title),
        "status": status_code,
        "code": code,
        "detail": detail,
        "violations": violations or [],
    }
    return Response(body, status=status_code, headers=headers, content_type=PROBLEM_CONTENT_TYPE)


def escape_pointer_token(token: Any) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _walk_validation(detail: Any, pointer: str) -> Iterator[dict[str, Any]]:
    """Flatten DRF's nested error detail into value-free violations (pointer, type, message).

    Keys of the detail are serializer field names or list indexes (the API declares no
    field whose errors are keyed by submitted keys), so a pointer repeats nothing submitted.
    """
    if isinstance(detail, dict):
        for key, child in detail.items():
            sub = pointer if key in ("non_field_errors",) else f"{pointer}/{escape_pointer_token(key)}"
            yield from _walk_validation(child, sub)
    elif isinstance(detail, list):
        if detail and all(isinstance(item, exceptions.ErrorDetail) for item in detail):
            for item in detail:
                yield _violation(item, pointer)
        else:
            for index, child in enumerate(detail):
                if child in ({}, [], None):
                    continue  # a list field's valid items leave empty holes
                yield from _walk_validation(child, f"{pointer}/{index}")
    elif isinstance(detail, exceptions.ErrorDetail):
        yield _violation(detail, pointer)


def _violation(item: exceptions.ErrorDetail, pointer: str) -> dict[str, Any]:
    code = str(item.code or "invalid")
    message = _QUOTING_CODES.get(code, str(item))
    return {"pointer": pointer, "type": code, "message": message}


def _protocol_problem(exc: exceptions.APIException) -> Response:
    headers: dict[str, str] = {}
    code = str(getattr(exc, "default_code", "error")).upper()
    title = title_of(code, "Request refused")
    detail = str(exc.detail) if isinstance(exc.detail, str) else title
    status_code = exc.status_code
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
    elif isinstance(exc, exceptions.PermissionDenied):
        code = "PERMISSION_DENIED"
    elif isinstance(exc, exceptions.NotFound):
        code = "NOT_FOUND"
    elif isinstance(exc, exceptions.MethodNotAllowed):
        detail = "this endpoint does not accept that method"
    elif isinstance(exc, exceptions.UnsupportedMediaType):
        detail = "send the body as application/json (definitions also accept application/yaml)"
    elif isinstance(exc, exceptions.NotAcceptable):
        detail = "this API answers application/json"
    elif isinstance(exc, exceptions.Throttled):
        code = "THROTTLED"
        detail = "too many requests; retry later"
        wait = getattr(exc, "wait", None)
        if wait is not None:
            headers["Retry-After"] = str(max(1, round(wait)))
    elif isinstance(exc, PayloadTooLarge):
        code = "PAYLOAD_TOO_LARGE"
    return problem(status_code, code, title, detail, headers=headers)


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: every error of the API becomes a problem+json response.

    A view whose renderers do not speak JSON by default (the OpenAPI schema view answers YAML)
    still answers its problems in JSON: the body must match the problem+json label.
    """
    response = _problem_for(exc)
    request = context.get("request")
    renderer = getattr(request, "accepted_renderer", None)
    if request is not None and not _speaks_json(renderer):
        request.accepted_renderer = ExactJSONRenderer()
        request.accepted_media_type = PROBLEM_CONTENT_TYPE
    return response


def _speaks_json(renderer: Any) -> bool:
    if renderer is None:
        return False
    return renderer.format == "api" or "json" in str(renderer.media_type)


def _problem_for(exc: Exception) -> Response:
    if isinstance(exc, WorkflowError):
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if exc.retryable else None
        return problem(
            exc.status, exc.code, exc.title, exc.message, [v.as_dict() for v in exc.violations], headers=headers
        )
    if isinstance(exc, exceptions.ValidationError):
        violations = list(_walk_validation(exc.detail, ""))
        return problem(
            400, "INVALID_PAYLOAD", "Invalid payload", "the request does not have the expected shape", violations
        )
    if isinstance(exc, exceptions.ParseError):
        return problem(
            400,
            "INVALID_PAYLOAD",
            "Invalid payload",
            "the request body is not valid JSON",
            [{"pointer": "", "type": "parse", "message": "not valid JSON"}],
        )
    if isinstance(exc, RequestDataTooBig):
        return _protocol_problem(PayloadTooLarge())
    if isinstance(exc, Http404):
        return _protocol_problem(exceptions.NotFound())
    if isinstance(exc, DjangoPermissionDenied):
        return _protocol_problem(exceptions.PermissionDenied())
    if isinstance(exc, exceptions.APIException):
        return _protocol_problem(exc)
    if isinstance(exc, DatabaseError) and is_bad_value(exc):
        # deterministic (a NUL character, an over-long text): a retry would fail again
        log.info("API request refused by the database as a bad value (%s)", type(exc).__name__)
        message = "a value of the request cannot be stored (a NUL character or an over-long text)"
        return problem(
            400,
            "INVALID_PAYLOAD",
            "Invalid payload",
            message,
            [{"pointer": "", "type": "encoding", "message": message}],
        )
    if isinstance(exc, DatabaseError):
        # Never the driver's text (it can quote the statement's parameters) nor its class:
        # the operations' mapping, retryable (503, Retry-After) only for a transient failure.
        log.warning("API request failed on the database (%s)", type(exc).__name__)
        return _problem_for(operations.database_error(exc, "request"))
    log.exception("unexpected error in an API view")
    return problem(500, "INTERNAL", "Internal error", "the server failed to answer this request")
