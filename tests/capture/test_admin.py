"""The capture admin and its reconcile screen (Django test client)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.urls import reverse

from capture.models import Capture
from demo.models import PurchaseOrder

pytestmark = pytest.mark.django_db

LIST = "admin:capture_capture_reconcile"


def unresolved(status: str, number: str = "PO-U") -> Capture:
    po = PurchaseOrder.objects.create(number=number, requester="requester", total=Decimal("1500"))
    capture = Capture.objects.get(object_pk=str(po.pk))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE capture_captures SET status = %s, attempts = 2, effect_started_at = now(), "
            "last_error = 'OUTCOME_UNKNOWN: the worker stopped after an effect started' WHERE id = %s",
            [status, capture.pk],
        )
    return capture


def confirm_url(capture: Capture, decision: str) -> str:
    return reverse("admin:capture_capture_reconcile_confirm", args=[capture.pk, decision])


def test_the_screen_lists_unresolved_captures_with_what_is_known(client, deploy, no_messages, demo_users):
    deploy()
    unknown = unresolved("OUTCOME_UNKNOWN", "PO-1")
    failed = unresolved("FAILED", "PO-2")
    done = unresolved("DISPATCHED", "PO-3")
    client.force_login(demo_users["admin"])
    page = client.get(reverse(LIST)).content.decode()
    assert f'id="capture-{unknown.pk}"' in page and f'id="capture-{failed.pk}"' in page
    assert f'id="capture-{done.pk}"' not in page
    assert "demo.PurchaseOrder #" in page and "Outcome Unknown" in page and "the worker stopped" in page
    assert confirm_url(unknown, "replay") in page and confirm_url(unknown, "resolve") in page
    only_failed = client.get(reverse(LIST), {"status": "FAILED"}).content.decode()
    assert f'id="capture-{unknown.pk}"' not in only_failed and f'id="capture-{failed.pk}"' in only_failed


@pytest.mark.parametrize("who", ["alice", "requester"])
def test_non_administrators_get_403(client, deploy, no_messages, demo_users, who):
    deploy()
    capture = unresolved("OUTCOME_UNKNOWN")
    client.force_login(demo_users[who])
    assert client.get(reverse(LIST)).status_code == 403
    assert client.get(confirm_url(capture, "replay")).status_code == 403
    assert client.post(confirm_url(capture, "replay"), {"reason": "x"}).status_code == 403
    assert Capture.objects.get(pk=capture.pk).status == "OUTCOME_UNKNOWN"


def test_a_signed_out_visitor_is_sent_to_the_login(client):
    response = client.get(reverse(LIST))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_blank_reason_is_asked_for_again(client, deploy, no_messages, demo_users):
    deploy()
    capture = unresolved("FAILED")
    client.force_login(demo_users["admin"])
    response = client.post(confirm_url(capture, "resolve"), {"reason": "   "})
    assert response.status_code == 200
    assert "Give the reason for this decision." in response.content.decode()
    assert Capture.objects.get(pk=capture.pk).status == "FAILED"


def test_resolving_keeps_who_and_why_and_returns_to_the_screen(client, deploy, no_messages, demo_users):
    deploy()
    capture = unresolved("OUTCOME_UNKNOWN")
    client.force_login(demo_users["admin"])
    response = client.post(confirm_url(capture, "resolve"), {"reason": "the ERP has the order"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse(LIST)
    assert f"Capture {capture.pk} was resolved." in response.content.decode()
    capture.refresh_from_db()
    assert (capture.status, capture.reconciled_by, capture.reconcile_reason) == (
        "RESOLVED",
        "admin",
        "the ERP has the order",
    )


def test_a_capture_decided_meanwhile_is_refused_with_the_reason(client, deploy, no_messages, demo_users):
    deploy()
    capture = unresolved("DISPATCHED")
    client.force_login(demo_users["admin"])
    response = client.post(confirm_url(capture, "replay"), {"reason": "again"})
    assert response.status_code == 409
    assert "only FAILED and OUTCOME_UNKNOWN captures are reconciled" in response.content.decode()


def test_the_capture_list_links_to_the_screen_and_the_detail_offers_the_actions(
    client, deploy, no_messages, demo_users
):
    deploy()
    capture = unresolved("FAILED")
    client.force_login(demo_users["admin"])
    listing = client.get(reverse("admin:capture_capture_changelist")).content.decode()
    assert "Reconcile (1 unresolved)" in listing
    detail = client.get(reverse("admin:capture_capture_change", args=[capture.pk])).content.decode()
    assert confirm_url(capture, "replay") in detail and confirm_url(capture, "resolve") in detail
