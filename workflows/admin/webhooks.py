"""Admin for webhook subscriptions (events out) and their deliveries.

Subscriptions are added, changed and deleted through ``workflows.operations`` (the same checks
as the API: https, a public address, known event types); the signing secret is shown on one
page right after it is made (add, *Rotate secret*), and never again. Deliveries are the outbox
intents of kind EVENT, read-only, each with its attempts and the receiver's status codes;
*Redeliver* makes one more attempt with the same ``webhook-id``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from workflows import operations, signals
from workflows.exceptions import WorkflowError
from workflows.models import WebhookDelivery, WebhookSubscription

FIELDS = ("url", "description", "events", "definition_id", "active")


class SubscriptionForm(forms.ModelForm):
    # checked by operations.webhook_problems (https, a public address), as in the API
    url = forms.CharField(label=_("URL"), max_length=2048, help_text=_("https only; the receiver's address."))
    events = forms.MultipleChoiceField(
        label=_("Events"),
        choices=[(name, name) for name in signals.EVENT_TYPES],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = WebhookSubscription
        fields = FIELDS

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        problems = operations.webhook_problems(url=data.get("url"), events=data.get("events") or [])
        for problem in problems:
            field = "url" if problem.pointer == "/url" else "events"
            if field in data:
                self.add_error(field, f"{problem.message[0].upper()}{problem.message[1:]}.")
        return data


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    form = SubscriptionForm
    list_display = ("id", "url", "event_list", "definition_id", "active", "created_at")
    list_filter = ("active",)
    search_fields = ("url", "description", "definition_id")
    ordering = ("-id",)
    readonly_fields = ("previous_secret_until", "created_at", "updated_at")
    actions = ["rotate_secret"]

    @admin.display(description=_("events"))
    def event_list(self, obj: WebhookSubscription) -> str:
        return ", ".join(obj.events or [])

    def save_model(self, request: HttpRequest, obj: WebhookSubscription, form: Any, change: bool) -> None:
        values = {name: form.cleaned_data[name] for name in FIELDS if name in form.cleaned_data}
        if change:
            operations.webhook_update(webhook_id=obj.pk, **values)
            return
        created, secret = operations.webhook_create(**values, owner=request.user)
        obj.pk = created.pk
        request._webhook_secrets = [(created, secret)]  # type: ignore[attr-defined]  # for response_add

    def response_add(self, request: HttpRequest, obj: WebhookSubscription, post_url_continue: Any = None) -> Any:
        made = getattr(request, "_webhook_secrets", None)
        if made:
            return self._secrets_page(request, made, rotated=False)
        return super().response_add(request, obj, post_url_continue)

    def delete_model(self, request: HttpRequest, obj: WebhookSubscription) -> None:
        operations.webhook_delete(webhook_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookSubscription]) -> None:
        for pk in list(queryset.values_list("pk", flat=True)):
            operations.webhook_delete(webhook_id=pk)

    @admin.action(description=_("Rotate the signing secret of the selected subscriptions"), permissions=["change"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookSubscription]) -> HttpResponse | None:
        made = []
        for pk in queryset.order_by("id").values_list("pk", flat=True):
            try:
                made.append(operations.webhook_rotate_secret(webhook_id=pk))
            except WorkflowError as error:
                self.message_user(request, f"{error.code}: {error.message}", messages.ERROR)
        return self._secrets_page(request, made, rotated=True) if made else None

    def _secrets_page(self, request: HttpRequest, made: list[Any], *, rotated: bool) -> HttpResponse:
        response = TemplateResponse(
            request,
            "workflows/webhooks/admin_secret.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Signing secret"),
                "opts": self.model._meta,
                "secrets": made,
                "rotated": rotated,
            },
        )
        response["Cache-Control"] = "no-store"  # a secret is not kept by a cache or the back button
        return response


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """The delivery log: read-only; *Redeliver* is the one action."""

    list_display = ("id", "event_type", "subscription", "run_id", "status", "attempts", "last_error", "created_at")
    list_filter = ("status",)
    search_fields = ("=target", "=run__id", "idempotency_key")
    ordering = ("-id",)
    actions = ["redeliver"]
    fields = ("event", "subscription", "run", "status", "attempts", "available_at", "last_error", "delivered_at", "log")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookDelivery]:
        return super().get_queryset(request).filter(kind="EVENT")

    @admin.display(description=_("event"))
    def event_type(self, obj: WebhookDelivery) -> str:
        return str((obj.payload or {}).get("type", ""))

    @admin.display(description=_("event"))
    def event(self, obj: WebhookDelivery) -> str:
        payload = obj.payload or {}
        return f"{payload.get('type', '')} {payload.get('id', '')}"

    @admin.display(description=_("subscription"))
    def subscription(self, obj: WebhookDelivery) -> str:
        return f"webhook {obj.target}"

    @admin.display(description=_("attempts (status code or error)"))
    def log(self, obj: WebhookDelivery) -> str:
        rows = obj.webhook_attempts.order_by("id")
        return format_html(
            "<ol>{}</ol>",
            format_html_join(
                "",
                "<li>{} — {} ({} ms)</li>",
                ((a.at, a.status_code if a.status_code is not None else a.error, a.duration_ms) for a in rows),
            ),
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # deliveries are made by events

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return bool(
            user.has_perm("workflows.view_webhooksubscription") or user.has_perm("workflows.change_webhooksubscription")
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("workflows.change_webhooksubscription"))

    @admin.action(description=_("Redeliver the selected events (same webhook-id)"), permissions=["redeliver"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        done = 0
        for pk in queryset.order_by("id").values_list("pk", flat=True):
            try:
                operations.webhook_redeliver(delivery_id=pk)
                done += 1
            except WorkflowError as error:
                self.message_user(request, f"{pk}: {error.code}: {error.message}", messages.ERROR)
        if done:
            self.message_user(request, _("%(count)d delivery(ies) will be attempted again.") % {"count": done})
