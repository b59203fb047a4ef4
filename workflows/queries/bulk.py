"""Reads of bulk operations (``/api/v1/bulk-operations/``, the admin): the records newest
first, one record with its counts per outcome, and the per-run results in frozen order."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from workflows.models import BulkItemStatus, BulkOperation, BulkOperationItem


def bulk_operations(*, action: str | None = None, status: str | None = None) -> QuerySet[Any]:
    """Bulk operations, newest first."""
    qs = BulkOperation.objects.order_by("-created_at", "-id")
    if action:
        qs = qs.filter(action=action)
    if status:
        qs = qs.filter(status=status)
    return qs


def bulk_operation(*, operation_id: Any) -> BulkOperation | None:
    """One bulk operation (None when there is none)."""
    try:
        return BulkOperation.objects.filter(pk=int(operation_id)).first()
    except (TypeError, ValueError, OverflowError):
        return None


def bulk_operation_counts(*, operation_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per operation, its items by outcome, every outcome named (0 when none)."""
    found: dict[int, dict[str, int]] = {i: dict.fromkeys(BulkItemStatus.values, 0) for i in operation_ids}
    rows = (
        BulkOperationItem.objects.filter(operation_id__in=operation_ids)
        .values_list("operation_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for operation_id, status, n in rows:
        found[int(operation_id)][str(status)] = int(n)
    return found


def bulk_operation_items(*, operation_id: Any, outcome: str | None = None) -> QuerySet[Any]:
    """The runs of a bulk operation with their outcome, in the order they were frozen."""
    qs = BulkOperationItem.objects.filter(operation_id=operation_id).order_by("id")
    if outcome:
        qs = qs.filter(status=outcome)
    return qs
