"""The Migrate dialog's background apply in Chromium: the progress bar advances while the
record is applied batch by batch, and the operator pauses it in the dialog, resumes it on the
record page and closes it there as partially applied, with a reason.

The batches are applied by the background task's body called from the test (one batch per
call), so the bar's steps are known; a real worker, killed in the middle of 5,000 runs, applies
them in tests/e2e/test_migrate_background_kill_browser.py.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/migrate-background.png.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine.test_migration_bulk import REVISION_1, REVISION_2
from tests.support.a11y import assert_accessible
from tests.support.browser import login
from workflows import conf, definitions, operations
from workflows.engine import executor
from workflows.engine.migration import background
from workflows.models import MigrationRecord, Run

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def parked(settings: Any, demo_users: dict[str, Any]) -> Iterator[list[str]]:
    settings.WORKFLOWS = {"MIGRATE": {"APPLY_BATCH": 2}}
    conf.reload()
    for text, activate in ((REVISION_1, True), (REVISION_2, False)):
        ref = definitions.load(scope="default", text=text, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(
                scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
            )
    runs = [
        operations.start(
            definition_id="bulk-move",
            payload={"route": "review", "amount": 10, "customer": {"name": "Acme"}},
            business_key=f"PO-{i}",
        ).run_id
        for i in range(1, 7)
    ]
    executor.drain(budget_seconds=30)
    yield [str(r) for r in runs]
    settings.WORKFLOWS = {}
    conf.reload()


def one_batch(record_id: int) -> None:
    """What the Celery task does, one batch at a time (its time budget is spent at once)."""
    assert background.run(record_id=record_id, budget_seconds=0) in ("more", "done", "waiting")


def test_progress_advances_and_the_operator_pauses_resumes_and_closes(
    page: Page, live_server: Any, parked: list[str], tmp_path: Path
) -> None:
    login(page, live_server, "admin", "admin", next="/migrate/default/bulk-move/?source=1&target=2")
    page.get_by_role("button", name=re.compile(r"6 runs at review")).click()
    assert page.locator("tr.position-row").count() == 1  # review is row 0
    page.get_by_label("Select all 6 runs at this position").check()
    page.locator("#selected-0").filter(has_text="all 6").wait_for()
    page.select_option("#do-0", "move:manager-review")
    page.get_by_role("button", name="Preview").click()
    page.locator("section.preview").get_by_role("button", name="Apply").click()

    card = page.locator("#migration-progress-card")
    card.get_by_role("heading", name=re.compile(r"Applying migration #\d+")).wait_for()
    record = MigrationRecord.objects.get()
    assert record.status == "APPLYING" and record.background
    assert page.locator("#progress-text").inner_text().startswith("0 of 6 runs done")

    # the bar follows the batches (the card polls every second)
    one_batch(record.id)
    page.locator("#progress-text").filter(has_text="2 of 6 runs done").wait_for()
    assert page.locator("#migration-progress").get_attribute("value") == "2"
    assert "2 moved" in card.locator(".outcome-counts").inner_text()
    shots = DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path
    card.screenshot(path=str(shots / "migrate-background.png"))

    assert_accessible(page, "the dialog with a migration being applied")
    # pause, confirmed in the card (keyboard: the disclosure opens with Enter)
    card.locator("summary", has_text="Pause…").focus()
    page.keyboard.press("Enter")
    card.get_by_role("button", name="Yes, pause").click()
    card.get_by_role("heading", name=re.compile(r"Migration #\d+ is paused")).wait_for()
    assert MigrationRecord.objects.get().status == "PAUSED"
    assert background.run(record_id=record.id, budget_seconds=0) == "held"  # a task applies nothing now
    assert page.locator("#progress-text").inner_text().startswith("2 of 6 runs done")

    # resume on the record page
    page.goto(f"{live_server.url}/migrate/records/{record.id}/")
    card = page.locator("#migration-progress-card")
    card.get_by_role("heading", name="Progress: paused").wait_for()
    card.locator("summary", has_text="Resume…").click()
    card.get_by_role("button", name="Yes, resume").click()
    card.get_by_role("heading", name="Progress: applying").wait_for()
    one_batch(record.id)
    page.locator("#progress-text").filter(has_text="4 of 6 runs done").wait_for()
    # a pause made elsewhere (another operator, the API) reaches this page through its poll
    operations.migration_pause(record_id=record.id, actor=None)
    card.get_by_role("heading", name="Progress: paused").wait_for()
    card.locator("summary", has_text="Resume…").click()
    card.get_by_role("button", name="Yes, resume").click()
    card.get_by_role("heading", name="Progress: applying").wait_for()

    # close as partially applied: the reason is required
    card.locator("summary", has_text="Close as partially applied…").click()
    card.get_by_role("button", name="Yes, close the migration").click()
    assert MigrationRecord.objects.get().status == "APPLYING"  # the form did not go without a reason
    card.get_by_label("Why (required)").fill("the managers' revision is wrong")
    assert_accessible(page, "the record page with the close confirmation open")
    page.set_viewport_size({"width": 390, "height": 900})
    card.screenshot(path=str(tmp_path / "progress-close-narrow.png"))
    card.get_by_role("button", name="Yes, close the migration").click()
    card.get_by_role("heading", name="Progress: closed as partially applied").wait_for()
    text = card.inner_text()
    assert "4 moved" in text and "2 not applied (closed)" in text and "the managers' revision is wrong" in text
    assert page.locator("#progress-text").inner_text() == "4 of 6 runs applied, 2 not applied (closed)"
    closed = MigrationRecord.objects.get()
    assert (closed.status, closed.closed_by, closed.close_reason) == (
        "CLOSED",
        "admin",
        "the managers' revision is wrong",
    )
    assert Run.objects.filter(pk__in=parked, version=1, current_step="review").count() == 2
    page.reload()
    assert "the managers' revision is wrong" in page.locator("body").inner_text()
    page.screenshot(path=str(tmp_path / "record-closed-narrow.png"), full_page=True)
