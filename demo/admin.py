from __future__ import annotations

from django.contrib import admin

from capture.admin import RecordRunsMixin
from demo.models import PurchaseOrder


@admin.register(PurchaseOrder)
class PurchaseOrderAdmin(RecordRunsMixin, admin.ModelAdmin):
    list_display = ("number", "requester", "total", "created_at")
    search_fields = ("number", "requester", "description")
    ordering = ("-created_at",)
    date_hierarchy = "created_at"
