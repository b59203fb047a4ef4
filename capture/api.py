"""Captures in the API (``/api/v1/captures/``): the list, and reconcile for administrators.

- ``GET /api/v1/captures/`` — newest first, cursor-paged; filters ``status`` (one or more,
  comma-separated), ``event``, ``model`` (``app_label.ModelName``), ``object_pk``. Needs
  the view captures capability (``workflows.access``).
- ``POST /api/v1/captures/{id}/reconcile/`` — ``{"replay": true|false, "reason": "..."}``;
  the operate capability only (``workflows.access``); answers the capture.
  Refusals: PERMISSION_DENIED (403), CAPTURE_NOT_FOUND (404), INVALID_TRANSITION (409: pending,
  active, dispatched or resolved), INVALID_PAYLOAD (400: blank reason).

Adapters only: the reconcile itself is :func:`capture.reconcile.reconcile`.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from capture import reconcile as reconciling
from capture.models import Capture, CaptureEvent, CaptureStatus
from workflows.access import Capability
from workflows.api.base import PAGE, ApiView, Cursor, errors, query, requires, valid


class CaptureCursor(Cursor):
    ordering = ("-id",)
    position_kind = "integer"


class ReconciledOut(serializers.Serializer):
    by = serializers.CharField()
    at = serializers.DateTimeField()
    reason = serializers.CharField()
    replayed = serializers.BooleanField()


class CaptureOut(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField()
    object_pk = serializers.CharField()
    event = serializers.ChoiceField(choices=CaptureEvent.choices)
    status = serializers.ChoiceField(choices=CaptureStatus.choices)
    snapshot = serializers.JSONField(allow_null=True)
    previous = serializers.JSONField(allow_null=True)
    changed = serializers.ListField(child=serializers.CharField())
    actor = serializers.CharField(allow_null=True)
    registry_stamp = serializers.CharField(allow_blank=True)
    attempts = serializers.IntegerField()
    last_error = serializers.CharField(allow_blank=True)
    effect_started_at = serializers.DateTimeField(allow_null=True)
    runs_started = serializers.ListField(child=serializers.CharField())
    runs_cancelled = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    dispatched_at = serializers.DateTimeField(allow_null=True)
    replays = serializers.IntegerField()
    reconciled = ReconciledOut(allow_null=True)


@extend_schema_field({"type": "string", "maxLength": reconciling.REASON_LIMIT, "pattern": r"[^\s\x00-\x1f\x7f-\x9f]"})
class ReasonField(serializers.CharField):
    """A reason that says something: reconcile refuses a blank one (pointer ``/reason``, its own
    message), so the serializer lets "" through to it and the schema states the rule."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return "" if data == "" else super().run_validation(data)


class ReconcileInput(serializers.Serializer):
    replay = serializers.BooleanField()
    reason = ReasonField(max_length=reconciling.REASON_LIMIT, trim_whitespace=False)


def capture_dict(capture: Capture) -> dict[str, Any]:
    reconciled = None
    if capture.reconciled_at is not None:
        reconciled = {
            "by": capture.reconciled_by,
            "at": capture.reconciled_at,
            "reason": capture.reconcile_reason,
            "replayed": bool(capture.replayed),
        }
    return {
        "id": capture.pk,
        "model": capture.model,
        "object_pk": capture.object_pk,
        "event": capture.event,
        "status": capture.status,
        "snapshot": capture.snapshot,
        "previous": capture.previous,
        "changed": list(capture.changed or []),
        "actor": capture.actor_name or None,
        "registry_stamp": capture.registry_stamp,
        "attempts": capture.attempts,
        "last_error": capture.last_error,
        "effect_started_at": capture.effect_started_at,
        "runs_started": list(capture.runs_started or []),
        "runs_cancelled": list(capture.runs_cancelled or []),
        "created_at": capture.created_at,
        "dispatched_at": capture.dispatched_at,
        "replays": capture.replays,
        "reconciled": reconciled,
    }


_STATUS = "|".join(CaptureStatus.values)


class CaptureFilters(serializers.Serializer):
    """The list's query parameters; anything else, or a value outside these, is 400."""

    status = serializers.CharField(
        required=False,
        max_length=255,
        validators=[RegexValidator(rf"^({_STATUS})(,({_STATUS}))*$", "not a comma-separated list of statuses")],
        help_text="one or more statuses, comma-separated",
    )
    event = serializers.ChoiceField(choices=CaptureEvent.choices, required=False)
    model = serializers.CharField(required=False, max_length=255, help_text="app_label.ModelName (any case)")
    object_pk = serializers.CharField(required=False, max_length=255, help_text="the record's primary key")


class CapturesView(ApiView):
    pagination_class = CaptureCursor
    read_permission = requires(Capability.VIEW_CAPTURES)

    @extend_schema(
        operation_id="captures_list",
        tags=["captures"],
        summary="Record captures, newest first",
        parameters=[*PAGE, CaptureFilters],
        responses={200: CaptureOut(many=True), **errors(404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        rows = Capture.objects.all()
        params = query(request, CaptureFilters)
        if "status" in params:
            rows = rows.filter(status__in=params["status"].split(","))
        if "event" in params:
            rows = rows.filter(event=params["event"])
        if "model" in params:
            rows = rows.filter(model__iexact=params["model"])
        if "object_pk" in params:
            rows = rows.filter(object_pk=params["object_pk"])
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return paginator.get_paginated_response(CaptureOut([capture_dict(c) for c in page], many=True).data)


class CaptureReconcileView(ApiView):
    write_permission = requires(Capability.OPERATE)

    @extend_schema(
        operation_id="captures_reconcile",
        tags=["captures"],
        summary="Replay or resolve a failed or unknown-outcome capture (administrators)",
        request=ReconcileInput,
        parameters=[OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses={
            200: CaptureOut,
            **errors(
                400,
                404,
                409,
                413,
                415,
                e400="INVALID_PAYLOAD: the body's shape, or a blank reason (pointer /reason)",
                e404="CAPTURE_NOT_FOUND",
                e409="INVALID_TRANSITION: the capture is pending, being dispatched, dispatched or resolved",
            ),
        },
    )
    def post(self, request: Request, id: str) -> Response:
        if not reconciling.is_administrator(request.user):
            raise reconciling.NotAdministrator("only administrators reconcile captures")
        data = valid(ReconcileInput, request.data)
        capture = reconciling.reconcile(capture_id=id, replay=data["replay"], reason=data["reason"], by=request.user)
        return Response(CaptureOut(capture_dict(capture)).data)


urlpatterns = [
    path("", CapturesView.as_view(), name="captures"),
    path("<str:id>/reconcile/", CaptureReconcileView.as_view(), name="capture-reconcile"),
]
