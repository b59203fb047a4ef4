"""An administrator reconciles, in Chromium, a capture whose worker died after its effect
marker; a non-administrator is refused. Real worker, beat and broker.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/capture-reconcile*.png; otherwise
the screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from capture.models import Capture
from demo.models import PurchaseOrder
from tests.support.browser import login
from tests.support.capture_callbacks import gate
from tests.support.waiting import eventually
from workflows.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def capture_with_unknown_outcome(worker: Any, crash: Any, pk: int) -> Capture:
    """A dispatch whose effect had started (its marker committed) when its worker was killed."""
    held = gate("effect", pk)
    held.touch()
    try:
        PurchaseOrder.objects.create(id=pk, number=f"PO-{pk}", requester="requester", total=Decimal("2400.00"))
        eventually(
            lambda: held.with_suffix(".entered").exists(), timeout=60, what="the effect to start", details=worker.logs
        )
        crash()  # SIGKILL inside the effect, after its marker; a new worker starts
    finally:
        held.unlink(missing_ok=True)
    capture = Capture.objects.get(object_pk=str(pk), event="created")

    def unknown() -> bool:
        capture.refresh_from_db()
        return capture.status == "OUTCOME_UNKNOWN"

    eventually(unknown, timeout=60, what="the sweep to find the expired, marked claim", details=worker.logs)
    assert capture.effect_started_at is not None
    assert not Run.objects.exists()  # the starts of the interrupted dispatch never committed
    return capture


def test_an_administrator_replays_an_outcome_unknown_capture_from_the_reconcile_screen(
    celery_worker_process: Any,
    crash_celery_worker: Any,
    deploy: Any,
    demo_users: Any,
    page: Any,
    live_server: Any,
    tmp_path: Path,
) -> None:
    deploy()
    capture = capture_with_unknown_outcome(celery_worker_process, crash_celery_worker, 920001)

    login(page, live_server, "admin", "admin", next="/admin/capture/capture/")
    page.get_by_role("link", name="Reconcile (1 unresolved)").click()
    row = page.locator(f"#capture-{capture.pk}")
    assert "Outcome Unknown" in row.inner_text() and "demo.PurchaseOrder #920001" in row.inner_text()
    page.screenshot(path=str(shots(tmp_path) / "capture-reconcile.png"), full_page=True)

    row.get_by_role("link", name=f"Replay capture {capture.pk}").click()
    assert "an effect of this dispatch may already have happened" in page.content()
    page.get_by_role("button", name=f"Replay capture {capture.pk}").click()
    assert page.get_by_role("alert").inner_text() == "Give the reason for this decision."
    page.get_by_label("Reason").fill("The notification never reached the ERP; replaying the order.")
    page.screenshot(path=str(shots(tmp_path) / "capture-reconcile-confirm.png"), full_page=True)
    page.get_by_role("button", name=f"Replay capture {capture.pk}").click()
    assert f"Capture {capture.pk} was queued for dispatch again." in page.content()
    assert "Nothing to reconcile." in page.content()

    def replayed() -> bool:
        capture.refresh_from_db()
        return capture.status == "DISPATCHED"

    eventually(replayed, timeout=60, what="the replay to be dispatched", details=celery_worker_process.logs)
    assert (capture.reconciled_by, capture.replayed, capture.replays) == ("admin", True, 1)
    assert capture.reconcile_reason == "The notification never reached the ERP; replaying the order."
    assert Run.objects.filter(definition_id="purchase-order-review", business_key="PO-920001").count() == 1


def test_a_non_administrator_gets_403_from_the_reconcile_screen(
    deploy: Any, no_messages: Any, demo_users: Any, page: Any, live_server: Any
) -> None:
    deploy()
    PurchaseOrder.objects.create(number="PO-403", requester="requester", total=Decimal("2400.00"))
    capture = Capture.objects.get()
    Capture.objects.filter(pk=capture.pk).update(status="OUTCOME_UNKNOWN")
    login(page, live_server, "alice", "alice", next="/tasks/")
    for url in ("/admin/capture/capture/reconcile/", f"/admin/capture/capture/{capture.pk}/reconcile/replay/"):
        response = page.goto(f"{live_server.url}{url}")
        assert response is not None and response.status == 403
    assert Capture.objects.get(pk=capture.pk).status == "OUTCOME_UNKNOWN"
