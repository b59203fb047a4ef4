"""Webhook subscriptions (events out) and their delivery log.

A subscription names an https URL, the event types it wants (``workflows.signals.EVENT_TYPES``)
and optionally one definition. Each event it matches becomes one outbox intent (kind
``EVENT``, target: the subscription's id) recorded with the transition; the delivery signs it
with the subscription's secret (Standard Webhooks) and writes one :class:`WebhookAttempt` per
attempt. The secret is kept to sign with (the API and the admin show it once, when it is made).
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.commands import OutboxIntent
from workflows.models.fields import json_field


class WebhookSubscription(models.Model):
    id = models.BigAutoField(primary_key=True)
    url = models.URLField(_("URL"), max_length=2048)
    description = models.CharField(_("description"), max_length=255, blank=True, default="")
    events = json_field(default=list)  # event type names
    definition_id = models.CharField(
        _("definition"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("Only this definition's runs (blank: all)."),
    )
    active = models.BooleanField(_("active"), default=True)
    # who made it (the user's USERNAME_FIELD): its events carry run metadata, so they are
    # delivered only while this user may view runs; blank for subscriptions made before owners
    owner = models.CharField(_("owner"), max_length=255, blank=True, default="", editable=False)
    secret = models.CharField(max_length=100, editable=False)
    # the secret a rotation replaced still signs (a second signature) until this time
    previous_secret = models.CharField(max_length=100, blank=True, default="", editable=False)
    previous_secret_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "workflow_webhook_subscriptions"
        verbose_name = _("webhook subscription")
        verbose_name_plural = _("webhook subscriptions")

    def __str__(self) -> str:
        return f"webhook {self.id}"


class WebhookAttempt(models.Model):
    """One attempt to deliver an event to a subscription: the receiver's status code, or a
    value-free error when there was none."""

    id = models.BigAutoField(primary_key=True)
    intent = models.ForeignKey(OutboxIntent, on_delete=models.CASCADE, related_name="webhook_attempts")
    subscription_id = models.BigIntegerField()
    event_id = models.CharField(max_length=64)
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=255, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "workflow_webhook_attempts"
        indexes = [models.Index(fields=["subscription_id", "-id"], name="workflow_webhook_attempt_sub")]

    def __str__(self) -> str:
        return f"attempt {self.id}"


class EventDeliveries(models.Manager["WebhookDelivery"]):
    def get_queryset(self) -> models.QuerySet[WebhookDelivery]:
        return super().get_queryset().filter(kind="EVENT")


class WebhookDelivery(OutboxIntent):
    """An event's delivery to one subscription: the outbox intent (kind EVENT), for the admin."""

    objects: ClassVar[EventDeliveries] = EventDeliveries()  # type: ignore[assignment]  # only the EVENT intents, wherever the model is asked for rows

    class Meta:
        proxy = True
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
