"""Admin for runs and their commands: find what needs attention and recover it.

Rows are read-only here. Every action calls ``workflows.operations``:

- **Retry** (runs, and the runs of selected commands) records a RETRY, the single recovery
  operation: a failed run resumes, dead-lettered commands are offered again.
- **Reconcile** an OUTCOME_UNKNOWN command (its email/agent/script effect may have happened):
  *replay* offers it again, *resolve* offers it with the effect recorded as done. A reason is
  required; who, when and why stay on the command. Administrators only (the operation checks).

A refusal is shown per row with its code. Each run links to its run viewer page.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import DateTimeField, ExpressionWrapper, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from workflows import access, conf, operations
from workflows.access import Capability
from workflows.admin.big import BigTableAdmin, DefinitionFilter, ScopeFilter
from workflows.exceptions import WorkflowError
from workflows.models import Command, Run

UNSETTLED = ("PENDING", "DEFERRED", "CLAIMED")


def _viewer_link(run_id: Any, text: str | None = None) -> str:
    url = reverse("workflows:runs:detail", args=[run_id])
    return format_html('<a href="{}">{}</a>', url, text or _("Open run viewer"))


class _ReadOnly(BigTableAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start and commands are recorded through operations only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the rows are the history of a run

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # the change list needs it for the actions; a single row is shown read-only
        return obj is None and super().has_change_permission(request, obj)

    # the actions ask the capabilities of workflows.access, as the API and the radar do
    def has_retry_permission(self, request: HttpRequest) -> bool:
        return access.has(request.user, Capability.RETRY)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return access.has(request.user, Capability.OPERATE)


def _retry_runs(modeladmin: admin.ModelAdmin, request: HttpRequest, run_ids: list[Any]) -> None:
    done = 0
    for run_id in run_ids:
        try:
            operations.retry(run_id=run_id, actor=request.user)
            done += 1
        except WorkflowError as error:
            modeladmin.message_user(request, f"Run {run_id}: {error.code}: {error.message}", messages.ERROR)
    if done:
        modeladmin.message_user(
            request, _("Recorded a retry for %(count)s run(s).") % {"count": done}, messages.SUCCESS
        )


# --- runs ------------------------------------------------------------------------------------


@admin.register(Run)
class RunAdmin(_ReadOnly):
    list_display = (
        "short_id",
        "definition_id",
        "version",
        "status",
        "current_step",
        "business_key",
        "created_at",
        "viewer",
    )
    list_filter = ("status", DefinitionFilter, ScopeFilter)
    search_fields = ("business_key", "definition_id", "subject_id")
    ordering = ("-created_at",)
    actions = ["retry"]
    readonly_fields = ["viewer", *[f.name for f in Run._meta.fields]]

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Run], search_term: str) -> Any:
        import uuid

        try:
            return queryset.filter(id=uuid.UUID(search_term.strip())), False
        except ValueError:
            return super().get_search_results(request, queryset, search_term)

    @admin.display(description=_("run"))
    def short_id(self, obj: Run) -> str:
        return str(obj.id)[:8]

    @admin.display(description=_("run viewer"))
    def viewer(self, obj: Run) -> str:
        return _viewer_link(obj.id)

    @admin.action(description=_("Retry selected runs (failed runs, dead-lettered commands)"), permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        _retry_runs(self, request, list(queryset.order_by("created_at").values_list("id", flat=True)))


# --- commands --------------------------------------------------------------------------------


class AttentionFilter(admin.SimpleListFilter):
    """Commands that need someone: stuck (unsettled past STUCK_AFTER_SECONDS, on the database
    clock), dead-lettered, deferred (no node can run them) and outcome unknown."""

    title = _("needs attention")
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:  # labels: lazy text
        return [
            ("stuck", _("Stuck")),
            ("dead", _("Dead")),
            ("deferred", _("Deferred")),
            ("outcome_unknown", _("Outcome unknown")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Command]) -> QuerySet[Command]:
        value = self.value()
        if value == "stuck":
            seconds = conf.get().EXECUTOR.STUCK_AFTER_SECONDS
            cutoff = ExpressionWrapper(Now() - timedelta(seconds=seconds), output_field=DateTimeField())
            return queryset.filter(status__in=UNSETTLED, recorded_at__lt=cutoff)
        if value == "dead":
            return queryset.filter(status="DEAD")
        if value == "deferred":
            return queryset.filter(status="DEFERRED")
        if value == "outcome_unknown":
            return queryset.filter(status="OUTCOME_UNKNOWN")
        return queryset


class ReconcileForm(forms.Form):
    # not "action": the admin reads that field for the action's own name
    decision = forms.ChoiceField(
        choices=[
            ("resolve", _("Resolve: the effect happened; continue after it without running it again")),
            ("replay", _("Replay: the effect did not happen; run the command again, effect included")),
        ],
        widget=forms.RadioSelect,
        label=_("Decision"),
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=1000,
        label=_("Reason"),
        help_text=_("Required. What you checked in the outside world; kept on the command and in the run's history."),
    )

    def clean_reason(self) -> str:
        reason = " ".join(str(self.cleaned_data.get("reason", "")).split())
        if not reason:
            raise forms.ValidationError(_("A reason is required."))
        return reason


@admin.register(Command)
class CommandAdmin(_ReadOnly):
    list_display = (
        "id",
        "run_link",
        "seq",
        "kind",
        "status",
        "attempts",
        "recorded_at",
        "available_at",
        "error",
        "reconciled",
    )
    list_filter = (AttentionFilter, "status", "kind")
    search_fields = ("run__business_key", "run__definition_id", "last_error")
    ordering = ("-recorded_at",)
    actions = ["retry", "reconcile"]
    readonly_fields = ["viewer", *[f.name for f in Command._meta.fields]]
    list_select_related = ("run",)

    @admin.display(description=_("run"))
    def run_link(self, obj: Command) -> str:
        return _viewer_link(obj.run_id, f"{obj.run.definition_id} {str(obj.run_id)[:8]}")

    @admin.display(description=_("run viewer"))
    def viewer(self, obj: Command) -> str:
        return _viewer_link(obj.run_id)

    @admin.display(description=_("last error"))
    def error(self, obj: Command) -> str:
        return obj.last_error[:120]

    @admin.display(description=_("reconciled"))
    def reconciled(self, obj: Command) -> str:
        if not obj.reconcile_action:
            return ""
        return f"{obj.reconcile_action} by {obj.reconciled_by}"

    @admin.action(description=_("Retry the runs of selected commands"), permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Command]) -> None:
        run_ids = list(dict.fromkeys(queryset.order_by("recorded_at").values_list("run_id", flat=True)))
        _retry_runs(self, request, run_ids)

    @admin.action(description=_("Reconcile selected OUTCOME_UNKNOWN commands…"), permissions=["operate"])
    def reconcile(self, request: HttpRequest, queryset: QuerySet[Command]) -> HttpResponse | None:
        form = ReconcileForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            action, reason = form.cleaned_data["decision"], form.cleaned_data["reason"]
            done = 0
            for command in queryset.order_by("recorded_at"):
                try:
                    operations.reconcile_command(
                        command_id=command.id, action=action, reason=reason, actor=request.user
                    )
                    done += 1
                except WorkflowError as error:
                    self.message_user(request, f"Command {command.id}: {error.code}: {error.message}", messages.ERROR)
            if done:
                self.message_user(
                    request,
                    _("Reconciled %(count)s command(s) (%(action)s).") % {"count": done, "action": action},
                    messages.SUCCESS,
                )
            return None
        commands = list(queryset.select_related("run").order_by("recorded_at"))
        markers = {m.command_id: m.step for m in _markers(commands)}
        return TemplateResponse(
            request,
            "workflows/runs/admin_reconcile.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Reconcile commands"),
                "opts": self.model._meta,
                "form": form,
                "rows": [{"command": c, "step": markers.get(c.id, "")} for c in commands],
                "unknown_count": sum(1 for c in commands if c.status == "OUTCOME_UNKNOWN"),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
            },
        )


def _markers(commands: list[Command]) -> list[Any]:
    from workflows.models import EffectMarker

    return list(EffectMarker.objects.filter(command_id__in=[c.id for c in commands]).order_by("started_at"))
