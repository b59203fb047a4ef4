"""The bulk operation admin in Chromium, at desktop and phone width: the record's progress bar
and its outcomes are readable, and its results link opens the per-run outcomes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model

from tests.engine import documents
from tests.support.browser import login
from tests.views.test_tasks_admin import deploy, drain
from workflows import operations

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_admin_shows_a_bulk_operations_progress_and_results(page: Page, live_server: Any, tmp_path: Path) -> None:
    deploy(documents.APPROVAL)
    runs = [
        operations.start(definition_id="approval", payload={"number": f"PO-{i}", "total": 5000}).run_id
        for i in range(3)
    ]
    drain()
    operations.cancel(run_id=runs[0], reason="gone")
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs, reason="supplier left")
    operations.bulk_operation_apply_batch(operation_id=operation_id)
    get_user_model().objects.create_superuser("root", password="root-pass-1")
    login(page, live_server, "root", "root-pass-1", next="/admin/")

    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/admin/workflows/bulkoperation/{operation_id}/change/")
        progress = page.locator("progress")
        assert progress.is_visible()
        assert progress.get_attribute("value") == "3" and progress.get_attribute("max") == "3"
        assert "APPLIED 2, REFUSED 1" in page.content()
        page.screenshot(path=str(tmp_path / f"bulk-admin-{width}.png"), full_page=True)

    page.get_by_role("link", name="Open the results of every run").click()
    page.wait_for_load_state()
    assert page.locator("#result_list td.field-code", has_text="SIGNAL_REJECTED").count() == 1
    page.screenshot(path=str(tmp_path / "bulk-results.png"), full_page=True)
