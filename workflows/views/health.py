"""``/healthz``: the database and the broker, each checked for real."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET
from kombu import Connection


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:  # noqa: BLE001 - any failure means "down"; the reason is named below
        return "database unreachable"
    return None


def _broker() -> str | None:
    # Read from Django settings, not the Celery app's cached copy, so the check follows the
    # configured broker; the connect timeout keeps an unreachable host from hanging probes.
    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}),
            connect_timeout=2,
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception:  # noqa: BLE001
        return "broker unreachable"
    return None


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    reasons = [r for r in (_database(), _broker()) if r]
    body = {"status": "ok" if not reasons else "unavailable", "database": "ok", "broker": "ok"}
    for reason in reasons:
        body[reason.split()[0]] = reason
    if reasons:
        body["reasons"] = reasons  # type: ignore[assignment]
    return JsonResponse(body, status=503 if reasons else 200)
