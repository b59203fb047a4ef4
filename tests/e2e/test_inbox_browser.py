"""Two approvers of one group in Chromium: search the inbox, claim a task, see the other's
claim, decide; and the inbox and task form at phone width (390 px) with no horizontal scroll
and the run's details before the decision buttons. Driven by keyboard where an approver would.

The executor runs in-process (``executor.drain``); no worker is needed. Set
``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/inbox.png and inbox-phone.png;
otherwise they go to the test's temporary folder.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine import documents
from tests.support.browser import login
from tests.views.test_tasks_pages import deploy, drain
from workflows import operations
from workflows.models import Command, Task

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
PHONE = {"width": 390, "height": 844}


@pytest.fixture(autouse=True)
def _no_confirmation_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workflows.views.tasks.CONFIRM_WAIT_SECONDS", 0)


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def _open_tasks() -> list[Task]:
    deploy(documents.APPROVAL)
    payloads = [
        {"number": "PO-2001", "total": 4800, "supplier": "Acme Tools", "lines": [{"item": "Drill", "qty": 12}]},
        {"number": "PO-2002", "total": 1250, "supplier": "Northwind Traders International Holdings"},
        {"number": "PO-2003", "total": 9900, "supplier": "Globex"},
    ]
    runs = [operations.start(definition_id="approval", business_key=p["number"], payload=p).run_id for p in payloads]
    drain()
    tasks = [Task.objects.get(run_id=r) for r in runs]
    soon = datetime.now(UTC) + timedelta(days=2)
    Task.objects.filter(pk=tasks[0].pk).update(due_at=soon)
    Task.objects.filter(pk=tasks[2].pk).update(due_at=soon - timedelta(days=3))  # overdue
    return tasks


def _no_horizontal_scroll(page: Page) -> None:
    width, viewport = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= viewport, f"{page.url} scrolls sideways at {viewport}px: {width}px wide"


def _signed_in(browser: Browser, live_server: Any, name: str, **context: Any) -> Page:
    page = browser.new_context(base_url=live_server.url, **context).new_page()
    page.context.set_default_timeout(15_000)
    login(page, live_server, name, name, next="/tasks/")
    return page


def test_two_approvers_claim_and_decide_by_keyboard(
    browser: Browser, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    tasks = _open_tasks()
    task = tasks[1]
    alice = _signed_in(browser, live_server, "alice")
    bob = _signed_in(browser, live_server, "bob")
    try:
        assert "3 open tasks, 1 overdue" in alice.inner_text("#inbox")
        _no_horizontal_scroll(alice)

        # search by keyboard: type into the search field, Enter submits the GET form
        alice.get_by_role("textbox", name="Search").focus()
        alice.keyboard.type("po-2002")
        with alice.expect_navigation():
            alice.keyboard.press("Enter")
        assert "q=po-2002" in alice.url and "1 open task matches" in alice.inner_text("#inbox")

        alice.get_by_role("link", name="Approve purchase PO-2002").focus()
        with alice.expect_navigation():
            alice.keyboard.press("Enter")
        alice.get_by_role("button", name="Claim").focus()
        with alice.expect_navigation():
            alice.keyboard.press("Enter")
        assert "You claimed this task" in alice.get_by_role("status").first.inner_text()
        assert Task.objects.get(pk=task.pk).claimed_by == "alice"

        # bob sees who holds it, in the inbox and on the task, and has nothing to press
        bob.reload()
        row = bob.get_by_role("row").filter(has=bob.get_by_role("link", name="Approve purchase PO-2002"))
        assert "Claimed by alice" in row.inner_text()
        bob.goto(f"/tasks/{task.id}/")
        assert "alice has claimed this task" in bob.inner_text("#task-claim")
        assert bob.locator("form.decision").count() == 0 and bob.get_by_role("button", name="Claim").count() == 0

        alice.reload()
        alice.get_by_role("button", name="Approve").focus()
        with alice.expect_navigation():
            alice.keyboard.press("Enter")
        assert "Your decision “Approve” was recorded." in alice.get_by_role("status").first.inner_text()
        drain(task.run_id)
        assert Task.objects.get(pk=task.pk).completed_by == "alice"
        assert Command.objects.filter(run_id=task.run_id, kind="COMPLETION").count() == 1

        alice.goto("/tasks/")
        assert "2 open tasks" in alice.inner_text("#inbox")
        alice.screenshot(path=str(_shots(tmp_path) / "inbox.png"), full_page=True)
        alice.get_by_role("link", name="Completed by me").click()
        assert "Approve purchase PO-2002" in alice.inner_text("#completed")
    finally:
        alice.context.close()
        bob.context.close()


def test_the_inbox_and_the_task_form_fit_a_phone(
    browser: Browser, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    tasks = _open_tasks()
    operations.claim_task(task_id=tasks[0].id, actor=demo_users["alice"])
    bob = _signed_in(browser, live_server, "bob", viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        assert "3 open tasks" in bob.inner_text("#inbox")
        _no_horizontal_scroll(bob)
        bob.screenshot(path=str(_shots(tmp_path) / "inbox-phone.png"), full_page=True)

        bob.get_by_role("link", name="Approve purchase PO-2001").click()  # claimed by alice
        _no_horizontal_scroll(bob)
        bob.goto(f"/tasks/{tasks[1].id}/")
        _no_horizontal_scroll(bob)
        details = bob.locator(".task-context").bounding_box()
        approve = bob.get_by_role("button", name="Approve").bounding_box()
        assert details is not None and approve is not None
        assert details["y"] + details["height"] <= approve["y"], "the run's details come before the decision"

        bob.goto("/tasks/?due_before=not-a-date")
        assert "Enter a date as YYYY-MM-DD." in bob.inner_text("main")
        _no_horizontal_scroll(bob)
    finally:
        bob.context.close()
