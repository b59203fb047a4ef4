"""Times in the reader's time zone (issue #30): a task's due time in the inbox, on the task form
and on My requests is shown in the browser's zone, with the absolute ISO time on hover, and
never as a bare "UTC". Chromium runs with ``timezone_id="America/New_York"``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine import documents
from tests.support.browser import login
from tests.views.test_tasks_pages import deploy, drain
from workflows import operations
from workflows.models import Task

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# 15:30 UTC in July is 11:30 in New York (EDT, UTC-4): a day and hour no UTC reader would see
DUE = datetime(2031, 7, 14, 15, 30, tzinfo=UTC)


def test_a_due_time_is_shown_in_the_readers_time_zone(
    browser: Browser, live_server: Any, demo_users: dict[str, Any]
) -> None:
    deploy(documents.APPROVAL)
    run_id = operations.start(
        definition_id="approval", business_key="PO-77", payload={"number": "PO-77", "total": 4800, "supplier": "Acme"}
    ).run_id
    drain()
    task = Task.objects.get(run_id=run_id)
    Task.objects.filter(pk=task.pk).update(due_at=DUE)
    context = browser.new_context(base_url=live_server.url, timezone_id="America/New_York", locale="en-US")
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        login(page, live_server, "alice", "alice", next="/tasks/")
        for path in ("/tasks/", f"/tasks/{task.pk}/"):
            page.goto(path)
            due = page.locator(f'time[datetime="{DUE.isoformat()}"]').first
            due.wait_for()
            page.wait_for_function("() => document.querySelector('time[datetime]:not([data-local])') === null")
            shown = due.inner_text()
            assert "11:30" in shown and ("EDT" in shown or "GMT-4" in shown), (path, shown)
            assert "15:30" not in shown
            assert due.get_attribute("title") == DUE.isoformat()  # the absolute time on hover
            assert "UTC" not in page.locator("main").inner_text()
    finally:
        context.close()
