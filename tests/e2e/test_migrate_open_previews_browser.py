"""A preview left behind, in Chromium: a user previews a migration, leaves the page and comes
back. The dialog lists the open preview at the top; Preview of the same runs is refused with a
link to the migration that holds them; Discard (confirmed) frees them and Preview works again.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/migrate-open-preview.png;
otherwise the screenshot goes to the test's temporary folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.test_migrate_browser import deploy
from tests.engine.test_migration import REVISION_1, REVISION_2
from tests.support.browser import login
from workflows import operations
from workflows.engine import executor
from workflows.models import MigrationRecord, Park

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def preview_review_runs(page: Page) -> None:
    """Select every run at review, end them, press Preview."""
    page.get_by_role("button", name=re.compile(r"3 runs at review")).click()
    page.locator("#picker-0").get_by_label("Select all 3 runs at this position").check()
    page.locator("#selected-0").filter(has_text="all 3").wait_for()
    page.select_option("#do-0", "end")
    page.get_by_role("button", name="Preview").click()


def test_an_abandoned_preview_is_listed_linked_and_discarded(
    page: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    deploy(REVISION_1, activate=True)
    deploy(REVISION_2, activate=False)
    for i in range(3):
        operations.start(definition_id="purchase-move", payload={"route": "review"}, business_key=f"PO-{i}")
    executor.drain(budget_seconds=10)  # no worker: the runs are started here, in the test
    assert Park.objects.filter(left_at__isnull=True).count() == 3
    dialog = "/migrate/default/purchase-move/?source=1&target=2"

    login(page, live_server, "admin", "admin", next=dialog)
    preview_review_runs(page)
    page.locator("section.preview").wait_for()
    record = MigrationRecord.objects.get()

    # the user leaves without Apply or Discard, and comes back
    page.goto(f"{live_server.url}{dialog}")
    card = page.locator("#open-previews")
    card.get_by_role("heading", name="1 preview is waiting: its runs are frozen").wait_for()
    assert "3 runs frozen" in card.inner_text() and "Previewed by admin" in card.inner_text()
    assert card.get_by_role("link", name=f"Resume #{record.id}: review and apply").get_attribute("href") == (
        f"/migrate/records/{record.id}/"
    )
    shots = DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path
    page.screenshot(path=str(shots / "migrate-open-preview.png"), full_page=True)

    # Preview of the same runs is refused, naming the migration with a link to it
    preview_review_runs(page)
    problems = page.locator("#preview-problems")
    problems.get_by_text("3 of the selected runs are frozen").wait_for()
    link = problems.get_by_role("link", name=f"Open migration #{record.id}")
    assert link.get_attribute("href") == f"/migrate/records/{record.id}/"

    # Discard, confirmed, frees the runs: Preview works again
    card.get_by_text(f"Discard #{record.id}…").click()
    card.get_by_role("button", name="Yes, discard").click()
    card.get_by_text(f"Migration #{record.id} was discarded").wait_for()
    record.refresh_from_db()
    assert record.status == "DISCARDED"
    page.get_by_role("button", name="Preview").click()
    page.locator("section.preview").wait_for()
    assert MigrationRecord.objects.filter(status="PREVIEWED").get().total == 3
