"""Capture's contribution to the operations pages: record captures counted by status (the
dashboard and the metrics gauges) and the OUTCOME_UNKNOWN ones (the stuck-run radar).

Workflows asks for these by module name when the capture app is installed
(``workflows.queries.ops``), so it never imports capture.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count

from capture.models import Capture, CaptureStatus


def capture_counts() -> dict[str, int]:
    """Record captures by status."""
    rows = Capture.objects.order_by().values("status").annotate(n=Count("id"))
    return {str(r["status"]): int(r["n"]) for r in rows}


def outcome_unknown_captures(*, limit: int) -> list[dict[str, Any]]:
    """OUTCOME_UNKNOWN record captures, oldest first."""
    rows = (
        Capture.objects.filter(status=CaptureStatus.OUTCOME_UNKNOWN)
        .order_by("created_at", "id")
        .values("id", "model", "object_pk", "event", "attempts", "created_at", "effect_started_at")[:limit]
    )
    found = [{"capture_id": r["id"], **{k: v for k, v in r.items() if k != "id"}} for r in rows]
    total = len(found) if len(found) < limit else Capture.objects.filter(status=CaptureStatus.OUTCOME_UNKNOWN).count()
    return [{**row, "total_rows": total} for row in found]
