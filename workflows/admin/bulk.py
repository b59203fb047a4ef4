"""Admin for bulk operations: read-only records with their progress, and each run's outcome.

A bulk operation is created through the API (``POST /api/v1/bulk-operations/``) or
``operations.bulk_operation_create`` and applied by a Celery task; nothing here writes. The
record's page shows who asked, what was selected, the counts per outcome and a progress bar;
its results link opens the per-run outcomes, filtered by outcome.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from workflows import queries
from workflows.models import BulkItemStatus, BulkOperation, BulkOperationItem


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # created through the API or operations.bulk_operation_create

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record is the audit trail of what was applied

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(BulkOperation)
class BulkOperationAdmin(_ReadOnly):
    list_display = ("id", "action", "status", "progress", "outcomes", "actor_id", "created_at", "finished_at")
    list_filter = ("status", "action")
    search_fields = ("actor_id", "reason", "signal_name")
    ordering = ("-created_at", "-id")
    fields = (
        "action",
        "status",
        "progress",
        "outcomes",
        "results",
        "selection",
        "filter",
        "signal_name",
        "reason",
        "actor_kind",
        "actor_id",
        "created_at",
        "started_at",
        "finished_at",
        "updated_at",
    )
    readonly_fields = fields

    def _counts(self, obj: BulkOperation) -> dict[str, int]:
        return queries.bulk_operation_counts(operation_ids=[obj.id])[obj.id]

    @admin.display(description=_("progress"))
    def progress(self, obj: BulkOperation) -> str:
        done = obj.total - self._counts(obj)[BulkItemStatus.PENDING]
        return format_html(
            '<progress value="{}" max="{}" aria-label="{}"></progress> {} / {}',
            done,
            max(obj.total, 1),
            _("runs with an outcome"),
            done,
            obj.total,
        )

    @admin.display(description=_("outcomes"))
    def outcomes(self, obj: BulkOperation) -> str:
        counts = self._counts(obj)
        return ", ".join(f"{status} {counts[status]}" for status in BulkItemStatus.values if counts[status])

    @admin.display(description=_("per-run results"))
    def results(self, obj: BulkOperation) -> str:
        url = reverse("admin:workflows_bulkoperationitem_changelist") + f"?operation__id__exact={obj.id}"
        return format_html('<a href="{}">{}</a>', url, _("Open the results of every run"))


@admin.register(BulkOperationItem)
class BulkOperationItemAdmin(_ReadOnly):
    list_display = ("id", "operation_id", "run_link", "status", "code", "detail", "command_id", "updated_at")
    list_filter = ("status", "code")
    ordering = ("operation_id", "id")
    readonly_fields = ("operation", "run_link", "status", "code", "detail", "command_id", "attempts", "updated_at")
    fields = readonly_fields

    @admin.display(description=_("run"))
    def run_link(self, obj: BulkOperationItem) -> str:
        url = reverse("workflows:runs:detail", args=[obj.run_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.run_id)[:8])
