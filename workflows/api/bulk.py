"""Bulk operations over runs (included at ``/api/v1/bulk-operations/``; issue #31).

- ``POST /api/v1/bulk-operations/`` ``{"action": "cancel"|"retry"|"signal", "filter": {...} |
  "run_ids": [...], "signal": {"name", "payload"?}, "reason"?}`` — freeze the selection (the
  filter takes the query parameters of ``GET /api/v1/runs/``, read by the same FilterSet) into
  a record and answer ``202`` with it and its ``Location``; a Celery task applies it in
  bounded batches. ``Idempotency-Key``: a repeat with the same body answers the first record.
- ``GET /api/v1/bulk-operations/?action=&status=`` — the records, newest first.
- ``GET /api/v1/bulk-operations/{id}/`` — a record: status, counts per outcome, progress.
- ``GET /api/v1/bulk-operations/{id}/results/?outcome=`` — each run's outcome, paged.

Creating one needs the capability of its action (cancel runs, retry runs, signal runs: the
single-run endpoints'); reading them, view runs. Adapters only: input → ``workflows.operations``
/ ``workflows.queries`` → output.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import QueryDict
from django.urls import path, reverse
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from workflows import access, conf, operations, queries
from workflows.access import Capability
from workflows.api import filters, pagination, permissions
from workflows.api.base import BODY, PAGE, ApiView, errors, valid
from workflows.api.errors import escape_pointer_token
from workflows.api.serializers import AnyJSONField
from workflows.api.views import IDEMPOTENCY_KEY, idempotency_key
from workflows.exceptions import InvalidPayload, Violation
from workflows.models import BulkAction, BulkItemStatus, BulkOperationStatus

NAME = 255
ACTION_CAPABILITY = {
    BulkAction.CANCEL: Capability.CANCEL,
    BulkAction.RETRY: Capability.RETRY,
    BulkAction.SIGNAL: Capability.SIGNAL,
}


class MayAct(BasePermission):
    """Holds for a caller with the capability of at least one bulk action; the action's own is
    asked once the body has been read (``BulkOperationsView.post``)."""

    message = "this needs the cancel runs, retry runs or signal runs capability"

    def has_permission(self, request: Request, view: Any) -> bool:
        return any(access.has(getattr(request, "user", None), c) for c in ACTION_CAPABILITY.values())


# --- serializers ----------------------------------------------------------------------------


# A component of its own: drf-spectacular would name a property's enum after the field, and the
# migrations API's ``action`` (move, cancel, end) has that name.
@extend_schema_field({"type": "string", "enum": BulkAction.values}, component_name="BulkAction")
class ActionField(serializers.ChoiceField):
    """cancel, retry or signal."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=BulkAction.values, **kwargs)


class SignalSpec(serializers.Serializer):
    name = serializers.CharField(max_length=NAME)
    payload = AnyJSONField(required=False, allow_null=True)


class BulkOperationInput(serializers.Serializer):
    action = ActionField()
    filter = serializers.DictField(
        required=False, help_text="the query parameters of GET /api/v1/runs/ as a JSON object (at least one)"
    )
    run_ids = serializers.ListField(child=serializers.UUIDField(), required=False, allow_empty=False)
    signal = SignalSpec(required=False, help_text="for action signal: the signal every run gets")
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")


class BulkOperationInputSchema(OpenApiSerializerExtension):
    """``BulkOperationInput`` as the schema states it, with what ``BulkOperationsView.post`` and
    ``selected_runs`` check besides the fields: the filter's members typed as the runs list's
    query parameters, either ``filter`` or ``run_ids`` (not both), ``signal`` for the action
    signal, and at most ``BULK.MAX_RUNS`` ids."""

    target_class = BulkOperationInput

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction != "request":
            return schema
        properties = schema["properties"]
        described = {"description": properties["filter"].get("description", "")}
        properties["filter"] = {**filters.object_schema(filters.RunSearch), **described}
        properties["run_ids"]["maxItems"] = conf.get().BULK.MAX_RUNS
        schema["oneOf"] = [
            {"required": ["filter"], "not": {"required": ["run_ids"]}},
            {"required": ["run_ids"], "not": {"required": ["filter"]}},
        ]
        # "not" around the enum: drf-spectacular's enum hook would make a listed enum a component
        not_signal = {"not": {"enum": [BulkAction.SIGNAL.value]}}
        schema["anyOf"] = [{"properties": {"action": not_signal}}, {"required": ["signal"]}]
        return schema


class RecordFilters(serializers.Serializer):
    action = ActionField(required=False)
    status = serializers.ChoiceField(choices=BulkOperationStatus.values, required=False)


class ResultFilters(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=BulkItemStatus.values, required=False)


class CountsOut(serializers.Serializer):
    PENDING = serializers.IntegerField()
    APPLIED = serializers.IntegerField()
    REFUSED = serializers.IntegerField()
    FAILED = serializers.IntegerField()


class SignalOut(serializers.Serializer):
    name = serializers.CharField()


class BulkOperationOut(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    action = ActionField()
    status = serializers.ChoiceField(choices=BulkOperationStatus.values)
    selection = serializers.ChoiceField(choices=["filter", "run_ids"])
    filter = serializers.DictField(allow_null=True)
    signal = SignalOut(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    created_by = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    total = serializers.IntegerField()
    done = serializers.IntegerField(help_text="runs with an outcome (applied, refused or failed)")
    left = serializers.IntegerField(help_text="runs still pending")
    counts = CountsOut()


class ResultOut(serializers.Serializer):
    run = serializers.UUIDField(source="run_id")
    outcome = serializers.ChoiceField(source="status", choices=BulkItemStatus.values)
    code = serializers.CharField(allow_blank=True, help_text="the refusal's stable code (empty when applied)")
    detail = serializers.CharField(allow_blank=True, help_text="why, in the framework's words: never a value")
    command = serializers.IntegerField(source="command_id", allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)


# --- helpers --------------------------------------------------------------------------------


class RecordCursor(pagination.Cursor):
    ordering = ("-created_at", "-id")


class ResultCursor(pagination.Cursor):
    ordering = ("id",)
    position_kind = "integer"


class _Query:
    """What ``filters.RunSearch.search`` reads of a request: its query parameters."""

    def __init__(self, params: QueryDict) -> None:
        self.query_params = params


def _narrows(value: Any) -> bool:
    """Whether a filter member selects fewer than every run: not empty, not blank, not an empty
    object (``state: {}`` is contained in every state), not a list of such members."""
    if isinstance(value, dict):
        return bool(value)
    if isinstance(value, list):
        return any(_narrows(item) for item in value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):  # a JSON object as text (``state``): its members decide
            try:
                return _narrows(json.loads(text))
            except ValueError:
                return True  # the search refuses it
        return bool(text)
    return value is not None


def selected_runs(filter: dict[str, Any]) -> Any:
    """The ids of the runs ``filter`` selects, oldest first (lazy), by the runs list's own
    FilterSet; its refusals point into ``/filter``."""
    if not filter:
        raise _empty_filter()
    params = QueryDict(mutable=True)
    bad = []
    for name, value in filter.items():
        values = (
            None
            if name in pagination.PAGE_PARAMETERS
            else filters.object_parameters(filters.RunSearch, str(name), value)
        )
        if values is None:
            bad.append(name)
        else:
            params.setlist(str(name), values)
    if bad:
        known = set(filters.RunSearch.base_filters)
        raise InvalidPayload(
            "invalid filter",
            violations=[
                Violation(
                    f"/filter/{escape_pointer_token(n)}" if filters.PARAMETER_NAME.fullmatch(str(n)) else "/filter",
                    "invalid" if n in known else "unknown",
                    "not of the type the filter takes: an integer (version), a status or a list of them, "
                    "a JSON object (state), a string"
                    if n in known
                    else "not a parameter of the runs list",
                )
                for n in sorted(map(str, bad))
            ],
        )
    try:
        runs = filters.RunSearch.search(_Query(params), queries.runs())  # type: ignore[arg-type]
    except InvalidPayload as refused:
        raise InvalidPayload(
            "invalid filter",
            violations=[Violation("/filter" + v.pointer, v.type, v.message) for v in refused.violations],
        ) from None
    # every member checked, not only the filter itself: {"state": {}} (contained in every
    # state) or an empty list narrows nothing and would select every run as well
    if not any(_narrows(value) for value in filter.values()):
        raise _empty_filter()
    # an empty state object is refused even beside other members, as the schema says
    # (minProperties 1): it never narrows anything
    if "state" in filter and isinstance(filter["state"], dict | str) and not _narrows(filter["state"]):
        raise InvalidPayload(
            "invalid filter",
            violations=[Violation("/filter/state", "minProperties", "name at least one key of the state")],
        )
    return runs.order_by("created_at", "id").values_list("id", flat=True)


def _empty_filter() -> InvalidPayload:
    message = "name at least one filter (an empty filter would select every run)"
    return InvalidPayload("the filter is empty", violations=[Violation("/filter", "required", message)])


def as_dict(record: Any, counts: dict[str, int]) -> dict[str, Any]:
    left = counts.get(BulkItemStatus.PENDING, 0)
    return {
        "id": record.id,
        "url": reverse("switchyard_api:bulk-operation", args=[record.id]),
        "action": record.action,
        "status": record.status,
        "selection": record.selection,
        "filter": record.filter,
        "signal": {"name": record.signal_name} if record.action == BulkAction.SIGNAL else None,
        "reason": record.reason,
        "created_by": record.actor_id,
        "created_at": record.created_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "total": record.total,
        "done": record.total - left,
        "left": left,
        "counts": counts,
    }


def record_of(operation_id: int) -> Any:
    record = queries.bulk_operation(operation_id=operation_id)
    if record is None:
        raise NotFound("no such bulk operation")
    return record


def answer(record: Any, *, code: int = status.HTTP_200_OK, headers: dict[str, str] | None = None) -> Response:
    counts = queries.bulk_operation_counts(operation_ids=[record.id])[record.id]
    return Response(BulkOperationOut(as_dict(record, counts)).data, status=code, headers=headers)


# --- views ----------------------------------------------------------------------------------


class BulkOperationsView(ApiView):
    read_permission = permissions.CanReadRuns
    write_permission = MayAct
    pagination_class = RecordCursor

    @extend_schema(
        operation_id="bulk_operations_list",
        tags=["bulk operations"],
        summary="Bulk operations, newest first",
        parameters=[RecordFilters, *PAGE],
        responses={200: BulkOperationOut(many=True), **errors(400, 404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        filters.refuse_unknown(request, RecordFilters().fields)
        chosen = valid(RecordFilters, request.query_params)
        records = queries.bulk_operations(action=chosen.get("action"), status=chosen.get("status"))
        paginator = self.pagination_class()
        page = list(paginator.paginate_queryset(records, request, view=self) or [])
        counts = queries.bulk_operation_counts(operation_ids=[r.id for r in page])
        return paginator.get_paginated_response(
            BulkOperationOut([as_dict(r, counts[r.id]) for r in page], many=True).data
        )

    @extend_schema(
        operation_id="bulk_operations_create",
        tags=["bulk operations"],
        summary="Cancel, retry or signal the runs of a filter or a list of ids, in the background",
        request=BulkOperationInput,
        parameters=[
            IDEMPOTENCY_KEY,
            OpenApiParameter(
                "Location", str, OpenApiParameter.HEADER, response=[202], description="the bulk operation"
            ),
        ],
        responses={
            202: OpenApiResponse(BulkOperationOut, description="frozen; a worker applies it in bounded batches"),
            **errors(
                *BODY,
                409,
                503,
                e400="INVALID_PAYLOAD: body shape, filter (pointers under /filter), an id that names no run, "
                "a selection larger than BULK.MAX_RUNS",
                e403="PERMISSION_DENIED: the caller lacks the capability of the action",
                e409="IDEMPOTENCY_CONFLICT",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        body = valid(BulkOperationInput, request.data)
        capability = ACTION_CAPABILITY[BulkAction(body["action"])]
        if not access.has(request.user, capability):
            raise PermissionDenied(access.refusal(capability))
        if ("filter" in body) == ("run_ids" in body):
            message = "give either filter or run_ids"
            raise InvalidPayload("choose the runs", violations=[Violation("", "one_of", message)])
        if body["action"] == BulkAction.SIGNAL and "signal" not in body:
            message = "the signal to send: name and payload"
            raise InvalidPayload("the signal is missing", violations=[Violation("/signal", "required", message)])
        signal = body.get("signal") or {}
        selection = selected_runs(body["filter"]) if "filter" in body else body["run_ids"]
        operation_id = operations.bulk_operation_create(
            action=body["action"],
            run_ids=selection,
            filter=body.get("filter"),
            signal_name=signal.get("name", ""),
            signal_payload=signal.get("payload"),
            reason=body["reason"],
            idempotency_key=key,
            actor=request.user,
        )
        record = record_of(operation_id)
        return answer(record, code=status.HTTP_202_ACCEPTED, headers={"Location": as_dict(record, {})["url"]})


OPERATION_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the bulk operation's id")


class BulkOperationView(ApiView):
    read_permission = permissions.CanReadRuns

    @extend_schema(
        operation_id="bulk_operations_read",
        tags=["bulk operations"],
        summary="A bulk operation: status, counts per outcome, progress",
        parameters=[OPERATION_ID],
        responses={200: BulkOperationOut, **errors(404)},
    )
    def get(self, request: Request, id: int) -> Response:
        return answer(record_of(id))


class BulkOperationResultsView(ApiView):
    read_permission = permissions.CanReadRuns
    pagination_class = ResultCursor

    @extend_schema(
        operation_id="bulk_operations_results",
        tags=["bulk operations"],
        summary="The outcome of every run of a bulk operation, in the order they were frozen",
        parameters=[OPERATION_ID, ResultFilters, *PAGE],
        responses={200: ResultOut(many=True), **errors(404)},
    )
    def get(self, request: Request, id: int) -> Response:
        filters.refuse_unknown(request, ResultFilters().fields)
        chosen = valid(ResultFilters, request.query_params)
        record = record_of(id)
        items = queries.bulk_operation_items(operation_id=record.id, outcome=chosen.get("outcome"))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(items, request, view=self) or []
        return paginator.get_paginated_response(ResultOut(page, many=True).data)


urlpatterns = [
    path("", BulkOperationsView.as_view(), name="bulk-operations"),
    path("<int:id>/", BulkOperationView.as_view(), name="bulk-operation"),
    path("<int:id>/results/", BulkOperationResultsView.as_view(), name="bulk-operation-results"),
]
