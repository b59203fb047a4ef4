"""Webhook subscriptions and their delivery log (included at ``/api/v1/webhooks/``).

- ``GET  /api/v1/webhooks/`` — subscriptions, newest first; ``POST`` subscribes
  (``url``, ``events``, optional ``definition_id``, ``active``, ``description``) and answers
  ``201`` with the signing ``secret`` (``whsec_...``), shown this once.
- ``GET / PATCH / DELETE /api/v1/webhooks/{webhook_id}/`` — read, change, delete one.
- ``POST /api/v1/webhooks/{webhook_id}/rotate-secret/`` — a new secret, shown once; the
  replaced one still signs, as a second signature, for 24 hours.
- ``GET  /api/v1/webhooks/{webhook_id}/deliveries/`` — its deliveries (one per event), newest
  first, each with its attempts and the receiver's status codes; ``?status=`` filters.
- ``POST /api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver/`` — one more
  attempt with the same ``webhook-id`` (``202``).

Reads need the view webhooks capability, writes manage webhooks (``workflows.access``).
Adapters only: input serializer → ``workflows.operations`` → output serializer; errors are
problem+json (INVALID_PAYLOAD with pointers, WEBHOOK_NOT_FOUND, DELIVERY_IN_FLIGHT).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from workflows import operations, signals
from workflows.access import Capability
from workflows.api.base import BODY, PAGE, ApiView, Cursor, errors, query, requires, valid
from workflows.engine.events import URL_MAX_CHARS, URL_PATTERN
from workflows.exceptions import WebhookNotFound
from workflows.models import OutboxIntent, WebhookAttempt, WebhookSubscription

CanView = requires(Capability.VIEW_WEBHOOKS)
CanManage = requires(Capability.MANAGE_WEBHOOKS)
WEBHOOK_ID = OpenApiParameter("webhook_id", OpenApiTypes.INT, OpenApiParameter.PATH)
DELIVERY_ID = OpenApiParameter("delivery_id", OpenApiTypes.INT, OpenApiParameter.PATH)


class NewestFirst(Cursor):
    ordering = ("-id",)
    position_kind = "integer"


# --- serializers ----------------------------------------------------------------------------


@extend_schema_field({"type": "string", "maxLength": URL_MAX_CHARS, "pattern": URL_PATTERN})
class UrlField(serializers.CharField):
    """A subscription's URL, as ``workflows.engine.events`` admits it (the schema states its
    pattern), taken as sent: untrimmed, so that the pattern judges what is stored."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=URL_MAX_CHARS, trim_whitespace=False, **kwargs)


class WebhookInput(serializers.Serializer):
    url = UrlField(help_text="https only; the receiver's address")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=list(signals.EVENT_TYPES)),
        max_length=len(signals.EVENT_TYPES),
        allow_empty=False,
    )
    definition_id = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    active = serializers.BooleanField(required=False, default=True)
    description = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")


class WebhookOut(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    definition_id = serializers.CharField(help_text="blank: every definition")
    active = serializers.BooleanField()
    description = serializers.CharField()
    previous_secret_until = serializers.DateTimeField(
        allow_null=True, help_text="until when the secret a rotation replaced still signs"
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class WebhookWithSecretOut(WebhookOut):
    secret = serializers.CharField(help_text="the signing secret (Standard Webhooks, whsec_...), shown this once")


class AttemptOut(serializers.Serializer):
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True, help_text="the receiver's answer; null: none came")
    error = serializers.CharField(help_text="why there was no answer (value-free)")
    duration_ms = serializers.IntegerField()


class DeliveryOut(serializers.Serializer):
    id = serializers.IntegerField()
    event_id = serializers.CharField(help_text="the webhook-id header: the same on every attempt")
    event_type = serializers.CharField()
    run_id = serializers.CharField()
    status = serializers.ChoiceField(choices=OutboxIntent.Status.choices)
    last_error = serializers.CharField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)
    payload = serializers.JSONField(help_text="the event as delivered")
    attempts = AttemptOut(many=True)


class NoFilters(serializers.Serializer):
    """A list without filters: only ``cursor`` and ``page_size``."""


class DeliveryFilters(serializers.Serializer):
    status = serializers.ChoiceField(choices=OutboxIntent.Status.choices, required=False)


def webhook_dict(subscription: WebhookSubscription, secret: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": subscription.id,
        "url": subscription.url,
        "events": list(subscription.events or []),
        "definition_id": subscription.definition_id,
        "active": subscription.active,
        "description": subscription.description,
        "previous_secret_until": subscription.previous_secret_until,
        "created_at": subscription.created_at,
        "updated_at": subscription.updated_at,
    }
    if secret is not None:
        data["secret"] = secret
    return data


def delivery_dict(intent: OutboxIntent) -> dict[str, Any]:
    payload = intent.payload if isinstance(intent.payload, dict) else {}
    pending = intent.status == OutboxIntent.Status.PENDING
    return {
        "id": intent.id,
        "event_id": str(payload.get("id", "")),
        "event_type": str(payload.get("type", "")),
        "run_id": str(intent.run_id),
        "status": intent.status,
        "last_error": intent.last_error,
        "next_attempt_at": intent.available_at if pending else None,
        "created_at": intent.created_at,
        "delivered_at": intent.delivered_at,
        "payload": payload,
        "attempts": [
            {"at": a.at, "status_code": a.status_code, "error": a.error, "duration_ms": a.duration_ms}
            for a in intent.webhook_attempts.all()
        ],
    }


def _subscription(webhook_id: str) -> WebhookSubscription:
    if not webhook_id.isascii() or not webhook_id.isdigit() or len(webhook_id) > 18:
        raise WebhookNotFound("no webhook subscription has this id")
    found = WebhookSubscription.objects.filter(pk=int(webhook_id)).first()
    if found is None:
        raise WebhookNotFound("no webhook subscription has this id")
    return found


# --- views ------------------------------------------------------------------------------------


class WebhooksView(ApiView):
    read_permission = CanView
    write_permission = CanManage
    pagination_class = NewestFirst

    @extend_schema(
        operation_id="webhooks_list",
        tags=["webhooks"],
        summary="Webhook subscriptions, newest first",
        parameters=PAGE,
        responses={200: WebhookOut(many=True), **errors(404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        query(request, NoFilters)  # an unknown parameter is 400, never ignored
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(WebhookSubscription.objects.all(), request, view=self) or []
        return paginator.get_paginated_response(WebhookOut([webhook_dict(w) for w in page], many=True).data)

    @extend_schema(
        operation_id="webhooks_create",
        tags=["webhooks"],
        summary="Subscribe an https URL to events; answers the signing secret once",
        request=WebhookInput,
        responses={
            201: WebhookWithSecretOut,
            **errors(
                *BODY,
                e400="INVALID_PAYLOAD: not https, credentials in the URL, a non-public address, "
                "no or unknown event types (pointers /url, /events/N)",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(WebhookInput, request.data)
        subscription, secret = operations.webhook_create(**data, owner=request.user)
        return Response(WebhookWithSecretOut(webhook_dict(subscription, secret)).data, status=status.HTTP_201_CREATED)


class WebhookView(ApiView):
    read_permission = CanView
    write_permission = CanManage

    @extend_schema(
        operation_id="webhooks_read",
        tags=["webhooks"],
        summary="A webhook subscription",
        parameters=[WEBHOOK_ID],
        responses={200: WebhookOut, **errors(404, e404="WEBHOOK_NOT_FOUND")},
    )
    def get(self, request: Request, webhook_id: str) -> Response:
        return Response(WebhookOut(webhook_dict(_subscription(webhook_id))).data)

    @extend_schema(
        operation_id="webhooks_update",
        tags=["webhooks"],
        summary="Change a webhook subscription (the fields given)",
        request=WebhookInput(partial=True),
        parameters=[WEBHOOK_ID],
        responses={200: WebhookOut, **errors(*BODY, 404, e404="WEBHOOK_NOT_FOUND")},
    )
    def patch(self, request: Request, webhook_id: str) -> Response:
        subscription = _subscription(webhook_id)
        changes = valid(WebhookInput, request.data, partial=True)
        changed = operations.webhook_update(webhook_id=subscription.id, **changes)
        return Response(WebhookOut(webhook_dict(changed)).data)

    @extend_schema(
        operation_id="webhooks_delete",
        tags=["webhooks"],
        summary="Delete a webhook subscription (its undelivered events die)",
        parameters=[WEBHOOK_ID],
        responses={204: None, **errors(404, e404="WEBHOOK_NOT_FOUND")},
    )
    def delete(self, request: Request, webhook_id: str) -> Response:
        operations.webhook_delete(webhook_id=_subscription(webhook_id).id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateSecretView(ApiView):
    write_permission = CanManage

    @extend_schema(
        operation_id="webhooks_rotate_secret",
        tags=["webhooks"],
        summary="A new signing secret, shown once; the old one signs beside it for 24 hours",
        request=None,
        parameters=[WEBHOOK_ID],
        responses={200: WebhookWithSecretOut, **errors(404, e404="WEBHOOK_NOT_FOUND")},
    )
    def post(self, request: Request, webhook_id: str) -> Response:
        subscription, secret = operations.webhook_rotate_secret(webhook_id=_subscription(webhook_id).id)
        return Response(WebhookWithSecretOut(webhook_dict(subscription, secret)).data)


def _deliveries(subscription: WebhookSubscription) -> Any:
    attempts = Prefetch("webhook_attempts", queryset=WebhookAttempt.objects.order_by("id"))
    return OutboxIntent.objects.filter(kind="EVENT", target=str(subscription.id)).prefetch_related(attempts)


class WebhookDeliveriesView(ApiView):
    read_permission = CanView
    pagination_class = NewestFirst

    @extend_schema(
        operation_id="webhooks_deliveries",
        tags=["webhooks"],
        summary="A subscription's deliveries, newest first, with every attempt's status code",
        parameters=[
            WEBHOOK_ID,
            *PAGE,
            OpenApiParameter("status", OpenApiTypes.STR, enum=list(OutboxIntent.Status.values)),
        ],
        responses={200: DeliveryOut(many=True), **errors(404, e404="WEBHOOK_NOT_FOUND, or an invalid cursor")},
    )
    def get(self, request: Request, webhook_id: str) -> Response:
        filters = query(request, DeliveryFilters)  # the request's own mistakes first (400)
        rows = _deliveries(_subscription(webhook_id))
        if "status" in filters:
            rows = rows.filter(status=filters["status"])
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return paginator.get_paginated_response(DeliveryOut([delivery_dict(d) for d in page], many=True).data)


class WebhookRedeliverView(ApiView):
    write_permission = CanManage

    @extend_schema(
        operation_id="webhooks_redeliver",
        tags=["webhooks"],
        summary="Deliver an event again: a new attempt with the same webhook-id",
        request=None,
        parameters=[WEBHOOK_ID, DELIVERY_ID],
        responses={
            202: OpenApiResponse(DeliveryOut, description="the delivery, due now"),
            **errors(404, 409, e404="WEBHOOK_NOT_FOUND", e409="DELIVERY_IN_FLIGHT: an attempt is under way"),
        },
    )
    def post(self, request: Request, webhook_id: str, delivery_id: str) -> Response:
        subscription = _subscription(webhook_id)
        if not delivery_id.isascii() or not delivery_id.isdigit() or len(delivery_id) > 18:
            raise WebhookNotFound("no webhook delivery has this id")
        if not _deliveries(subscription).filter(pk=int(delivery_id)).exists():
            raise WebhookNotFound("no webhook delivery has this id")
        operations.webhook_redeliver(delivery_id=int(delivery_id))
        delivery = _deliveries(subscription).get(pk=int(delivery_id))
        return Response(DeliveryOut(delivery_dict(delivery)).data, status=status.HTTP_202_ACCEPTED)


urlpatterns = [
    path("", WebhooksView.as_view(), name="webhooks"),
    path("<str:webhook_id>/", WebhookView.as_view(), name="webhook"),
    path("<str:webhook_id>/rotate-secret/", WebhookRotateSecretView.as_view(), name="webhook-rotate-secret"),
    path("<str:webhook_id>/deliveries/", WebhookDeliveriesView.as_view(), name="webhook-deliveries"),
    path(
        "<str:webhook_id>/deliveries/<str:delivery_id>/redeliver/",
        WebhookRedeliverView.as_view(),
        name="webhook-redeliver",
    ),
]
