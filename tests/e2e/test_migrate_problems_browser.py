"""The Migrate dialog's refusals in Chromium, as an operator meets them: each one is shown in
the alert region next to the control that caused it (no choice for selected runs, a wrong
count typed for a large batch, a selection that went stale, a permission taken away), and the
next request clears it. After Apply the dialog shows the database again.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/migrate-error*.png; otherwise the
screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.test_migrate_browser import _shots, deploy
from tests.engine.test_migration import REVISION_1, REVISION_2
from tests.support.browser import login
from workflows import operations
from workflows.engine import executor
from workflows.models import MigrationRecord

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DIALOG = "/migrate/default/purchase-move/"


@pytest.fixture
def review_runs(live_server: Any, demo_users: dict[str, Any]) -> list[str]:
    """Three runs parked at review on revision 1 (renamed manager-review in revision 2)."""
    deploy(REVISION_1, activate=True)
    deploy(REVISION_2, activate=False)
    runs = [
        operations.start(definition_id="purchase-move", payload={"route": "review"}, business_key=f"PO-{i}").run_id
        for i in range(1, 4)
    ]
    executor.drain(budget_seconds=10)
    return runs


def open_dialog(page: Page, live_server: Any) -> None:
    login(page, live_server, "admin", "admin", next=DIALOG)
    page.get_by_role("heading", name=re.compile("Migrate parked runs")).wait_for()


def pick(page: Page, *labels: str) -> None:
    page.get_by_role("button", name=re.compile(r"3 runs at review")).click()
    for n, label in enumerate(labels, start=1):
        page.get_by_label(f"Select run {label}").check()
        page.locator("#selected-0").filter(has_text=f"{n} of 3").wait_for()


def test_selected_runs_without_a_choice_are_refused_next_to_preview(
    page: Page, live_server: Any, review_runs: list[str], tmp_path: Path
) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    open_dialog(page, live_server)
    pick(page, "PO-1", "PO-2")
    assert page.locator("#do-0").input_value() == ""  # review was renamed: nothing preselected
    # by keyboard: from the reason field past the digest checkbox to Preview, and press it
    page.locator("#reason").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "notify-digest"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Preview"
    page.keyboard.press("Enter")
    alert = page.locator("#preview-problems .problem")
    alert.wait_for()
    assert page.locator("#preview-problems").get_attribute("role") == "alert"
    text = alert.inner_text()
    assert "Choose what to do with the selected runs" in text and "Nothing was previewed." in text
    assert "Choose what to do with the runs selected at review." in text
    assert page.locator("#do-0").get_attribute("aria-invalid") == "true"  # the row at fault
    page.locator("#preview-problems").scroll_into_view_if_needed()
    page.screenshot(path=str(_shots(tmp_path) / "migrate-error.png"), full_page=False)
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#preview-problems").scroll_into_view_if_needed()
    page.screenshot(path=str(_shots(tmp_path) / "migrate-error-narrow.png"), full_page=False)
    page.set_viewport_size({"width": 1280, "height": 900})
    assert not MigrationRecord.objects.exists()

    # choosing, then Preview again: the message goes, the preview comes
    page.select_option("#do-0", "move:manager-review")
    page.get_by_role("button", name="Preview", exact=True).click()
    page.get_by_role("heading", name="Preview — nothing has changed yet").wait_for()
    assert page.locator("#preview-problems").inner_text() == ""
    assert page.locator("#do-0").get_attribute("aria-invalid") is None

    # picking more runs leaves the preview; a refused Preview removes it (it answered the old form)
    page.get_by_label("Select run PO-3").check()
    page.locator("#selected-0").filter(has_text="3 of 3").wait_for()
    assert page.locator("section.preview").count() == 1
    page.select_option("#do-0", "")
    page.get_by_role("button", name="Preview", exact=True).click()
    page.locator("#preview-problems .problem").wait_for()
    assert page.locator("section.preview").count() == 0


def test_a_wrong_count_is_refused_next_to_the_confirmation_then_apply_refreshes_the_dialog(
    page: Page, live_server: Any, review_runs: list[str], monkeypatch: Any
) -> None:
    from workflows.engine import migration
    from workflows.views import migrate as view

    monkeypatch.setattr(view, "LARGE_BATCH", 2)
    monkeypatch.setattr(migration.apply, "LARGE_BATCH", 2)
    open_dialog(page, live_server)
    pick(page, "PO-1", "PO-2", "PO-3")
    page.select_option("#do-0", "move:manager-review")
    page.get_by_role("button", name="Preview", exact=True).click()
    page.get_by_label(re.compile("Type 3 to confirm")).fill("2")
    page.get_by_role("button", name="Apply").click()
    alert = page.locator("#apply-problems .problem")
    alert.wait_for()
    assert "The number typed is not the number of runs" in alert.inner_text()
    assert "Nothing was applied" in alert.inner_text()
    assert page.locator("section.preview").is_visible()  # the preview stays to be confirmed
    assert page.locator("#confirm").get_attribute("aria-describedby") == "confirm-help apply-problems"

    page.locator("#confirm").fill("3")
    page.get_by_role("button", name="Apply").click()
    page.locator("section.progress-card").wait_for()
    # the background task (its body, run here) applies the record; the card's poll sees it done
    record = MigrationRecord.objects.get()
    assert migration.background.run(record_id=record.id, budget_seconds=10) == "done"
    page.get_by_role("heading", name=re.compile(r"Migration #\d+ is done")).wait_for()
    # the dialog is read again: no run is left at review, nothing is selected, the total fell
    page.get_by_text("No runs are parked on revision 1").wait_for()
    assert page.locator("#parked-total").inner_text() == "3 runs"  # now on revision 2
    assert page.locator("#source option[value='1']").inner_text().startswith("Revision 1 — 0 parked")
    assert page.locator("#apply-problems").count() == 0


def test_a_stale_selection_is_refused(page: Page, live_server: Any, review_runs: list[str]) -> None:
    open_dialog(page, live_server)
    pick(page, "PO-1")
    page.select_option("#do-0", "end")
    operations.cancel(run_id=review_runs[0])  # meanwhile someone cancels PO-1
    executor.drain(budget_seconds=10)
    page.get_by_role("button", name="Preview", exact=True).click()
    alert = page.locator("#preview-problems .problem")
    alert.wait_for()
    assert "The selected runs are no longer parked there" in alert.inner_text()
    assert not MigrationRecord.objects.exists()


def test_a_permission_taken_away_is_refused(
    page: Page, live_server: Any, review_runs: list[str], demo_users: dict[str, Any]
) -> None:
    open_dialog(page, live_server)
    admin = demo_users["admin"]
    admin.is_superuser = False
    admin.save(update_fields=["is_superuser"])
    page.get_by_role("button", name=re.compile(r"3 runs at review")).click()
    alert = page.locator("#picker-problems-0 .problem")
    alert.wait_for()
    assert "Not allowed" in alert.inner_text() and "workflows.migrate_runs" in alert.inner_text()
    page.select_option("#do-0", "end")
    page.get_by_role("button", name="Preview", exact=True).click()
    page.locator("#preview-problems .problem").filter(has_text="Not allowed").wait_for()
    assert not MigrationRecord.objects.exists()
