"""``/api/v1/captures/``: the list and reconcile (problem+json errors, administrators only)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from capture.models import Capture
from demo.models import PurchaseOrder

pytestmark = pytest.mark.django_db


def capture(status: str, number: str) -> Capture:
    po = PurchaseOrder.objects.create(number=number, requester="requester", total=Decimal("1500"))
    found = Capture.objects.get(object_pk=str(po.pk))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE capture_captures SET status = %s WHERE id = %s", [status, found.pk])
    return found


def test_the_list_pages_newest_first_and_filters_by_status(client, deploy, no_messages, demo_users):
    deploy()
    first = capture("FAILED", "PO-1")
    second = capture("DISPATCHED", "PO-2")
    client.force_login(demo_users["admin"])
    body = client.get("/api/v1/captures/").json()
    assert [c["id"] for c in body["results"]] == [second.pk, first.pk]
    assert body["results"][1]["snapshot"]["number"] == "PO-1" and body["results"][1]["reconciled"] is None
    failed = client.get("/api/v1/captures/", {"status": "FAILED,OUTCOME_UNKNOWN"}).json()
    assert [c["id"] for c in failed["results"]] == [first.pk]


def test_reading_captures_needs_the_view_permission(client, deploy, no_messages, demo_users):
    client.force_login(demo_users["alice"])
    response = client.get("/api/v1/captures/")
    assert response.status_code == 403 and response.json()["code"] == "PERMISSION_DENIED"


def test_an_administrator_resolves_with_a_reason(client, deploy, no_messages, demo_users):
    deploy()
    found = capture("OUTCOME_UNKNOWN", "PO-1")
    client.force_login(demo_users["admin"])
    response = client.post(
        f"/api/v1/captures/{found.pk}/reconcile/",
        {"replay": False, "reason": "done by hand"},
        content_type="application/json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "RESOLVED" and body["reconciled"]["by"] == "admin"
    assert body["reconciled"]["reason"] == "done by hand" and body["reconciled"]["replayed"] is False


def test_reconcile_refusals_are_problems(client, deploy, no_messages, demo_users):
    deploy()
    found = capture("OUTCOME_UNKNOWN", "PO-1")
    done = capture("DISPATCHED", "PO-2")
    url = f"/api/v1/captures/{found.pk}/reconcile/"
    client.force_login(demo_users["alice"])
    refused = client.post(url, {"replay": True, "reason": "x"}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"
    client.force_login(demo_users["admin"])
    blank = client.post(url, {"replay": True, "reason": " "}, content_type="application/json")
    assert blank.status_code == 400 and blank.json()["violations"][0]["pointer"] == "/reason"
    missing = client.post(
        "/api/v1/captures/999999/reconcile/", {"replay": True, "reason": "x"}, content_type="application/json"
    )
    assert missing.status_code == 404 and missing.json()["code"] == "CAPTURE_NOT_FOUND"
    conflict = client.post(
        f"/api/v1/captures/{done.pk}/reconcile/", {"replay": True, "reason": "x"}, content_type="application/json"
    )
    assert conflict.status_code == 409 and conflict.json()["code"] == "INVALID_TRANSITION"
    assert Capture.objects.get(pk=found.pk).status == "OUTCOME_UNKNOWN"
