"""The Migrate dialog in Chromium, with a real Celery worker applying the MIGRATION commands.

Runs are parked at three positions of revision 1. From the workflow's admin page an operator
opens "Migrate (7 parked)", moves two picked runs of the review position to the renamed node
of revision 2 (their approvals leave alice's inbox and reappear in bob's), cancels the timer
position and ends the signal position; the run viewer explains the move.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/migrate-*.png; otherwise the
screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine.test_migration import REVISION_1, REVISION_2
from tests.support.browser import login
from tests.support.waiting import eventually
from workflows import definitions, operations, queries
from workflows.models import MigrationRecord, Park, Run

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def deploy(text: str, *, activate: bool) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    if activate:
        definitions.activate(
            scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
        )


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def test_the_dialog_moves_cancels_and_ends_three_positions(
    celery_worker_process: Any, page: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    deploy(REVISION_1, activate=True)
    deploy(REVISION_2, activate=False)
    runs: dict[str, list[str]] = {}
    for node, route, prefix, n in (
        ("review", "review", "PO", 3),
        ("cool-off", "cool", "CO", 2),
        ("wait-goods", "goods", "GO", 2),
    ):
        runs[node] = [
            operations.start(
                definition_id="purchase-move", payload={"route": route}, business_key=f"{prefix}-{i}"
            ).run_id
            for i in range(1, n + 1)
        ]
    eventually(lambda: Park.objects.filter(left_at__isnull=True).count() == 7, what="seven runs parked")
    alice, bob = demo_users["alice"], demo_users["bob"]
    assert queries.tasks_for(alice).count() == 3 and not queries.tasks_for(bob).exists()
    picked = runs["review"][:2]  # PO-1 and PO-2

    login(page, live_server, "admin", "admin", next="/admin/workflows/definitionversion/")
    page.get_by_role("link", name="Migrate (7 parked)").click()
    page.get_by_role("heading", name=re.compile("Migrate parked runs")).wait_for()
    assert page.locator("#source").input_value() == "1" and page.locator("#target").input_value() == "2"
    assert page.locator("tr.position-row").count() == 3
    assert page.locator("#selected-1").inner_text() == "none"

    # review (row 1): pick two runs and move them to the renamed node
    page.get_by_role("button", name=re.compile(r"3 runs at review")).click()
    page.get_by_label("Select run PO-1").check()
    page.locator("#selected-1").filter(has_text="1 of 3").wait_for()
    page.get_by_label("Select run PO-2").check()
    page.locator("#selected-1").filter(has_text="2 of 3").wait_for()
    page.select_option("#do-1", "move:manager-review")
    # cool-off (row 0): every run, cancelled
    page.get_by_role("button", name=re.compile(r"2 runs at cool-off")).click()
    page.locator("#picker-0").get_by_label("Select all 2 runs at this position").check()
    page.locator("#selected-0").filter(has_text="all 2").wait_for()
    page.select_option("#do-0", "cancel")
    # wait-goods (row 2): every run, ended
    page.get_by_role("button", name=re.compile(r"2 runs at wait-goods")).click()
    page.locator("#picker-2").get_by_label("Select all 2 runs at this position").check()
    page.locator("#selected-2").filter(has_text="all 2").wait_for()
    page.select_option("#do-2", "end")
    page.fill("#reason", "reviews now go to the managers")
    # (docs/screenshots/migrate-dialog.png comes from test_migrate_panes_browser.py)
    page.screenshot(path=str(tmp_path / "migrate-dialog.png"), full_page=True)

    page.get_by_role("button", name="Preview").click()
    preview = page.locator("section.preview")
    preview.get_by_role("heading", name="Preview — nothing has changed yet").wait_for()
    assert "2 approvals withdrawn from the inbox of user alice" in preview.inner_text()
    assert "user bob; notified: bob" in preview.inner_text()
    assert queries.tasks_for(alice).count() == 3  # a preview changes nothing
    preview.screenshot(path=str(_shots(tmp_path) / "migrate-preview.png"))

    preview.get_by_role("button", name="Apply").click()
    page.get_by_role("heading", name=re.compile(r"Migration #\d+ is done")).wait_for(timeout=30_000)
    assert page.locator("#progress-text").inner_text().startswith("6 of 6 runs done")
    page.locator("section.progress-card").screenshot(path=str(_shots(tmp_path) / "migrate-progress.png"))

    # the approvals left alice's inbox and reappeared in bob's, under the new node
    assert [str(t.run_id) for t in queries.tasks_for(alice)] == [runs["review"][2]]
    moved = queries.tasks_for(bob)
    assert sorted(str(t.run_id) for t in moved) == sorted(picked)
    assert {t.step for t in moved} == {"manager-review"}
    assert {Run.objects.get(pk=r).status for r in runs["cool-off"]} == {"CANCELLED"}
    assert {Run.objects.get(pk=r).status for r in runs["wait-goods"]} == {"COMPLETED"}
    record = MigrationRecord.objects.get()
    assert (record.status, record.created_by, record.reason) == ("DONE", "admin", "reviews now go to the managers")

    # the record keeps who moved what, and why
    page.get_by_role("link", name="The migration record").click()
    page.get_by_role("heading", name=re.compile(r"Migration #\d+")).wait_for()
    assert "reviews now go to the managers" in page.locator("body").inner_text()
    page.screenshot(path=str(_shots(tmp_path) / "migrate-record.png"), full_page=True)

    # the run viewer explains the move on the park it closed
    page.goto(f"{live_server.url}/runs/{picked[0]}/")
    assert re.search(r"moved to\s+manager-review\s+of version 2\b.*\bby admin", page.locator("body").inner_text())
    # and the cancel and the end, with the migration that did them
    for run_id, how in ((runs["cool-off"][0], "cancelled"), (runs["wait-goods"][0], "ended")):
        page.goto(f"{live_server.url}/runs/{run_id}/")
        assert re.search(rf"\b{how} by admin — migration #{record.id}\b", page.locator("body").inner_text())

    # and bob sees the approval in his inbox
    page.context.clear_cookies()
    login(page, live_server, "bob", "bob", next="/tasks/")
    assert page.get_by_text("Manager review review").count() == 2
