"""A requester starts a request and follows it in Chromium, with the keyboard only, at a
desktop width and at a phone's: New request, the generated form (an error first), My
requests with where the run waits and who holds it, and the request's own page.

The executor is drained in the test (no worker): the page shows what the engine did.
Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/new-request.png and
my-requests.png; otherwise the screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import login
from tests.views.test_requests import DEMO, DESCRIBED, deploy
from workflows.engine import executor
from workflows.models import Run

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def _tab_to(page: Page, text: str, *, limit: int = 60) -> None:
    """Press Tab until the focused element's text or label is ``text``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "() => { const e = document.activeElement; const l = e.labels && e.labels[0];"
            " return ((l ? l.innerText : e.innerText) || e.value || '').replace('*', '').trim(); }"
        )
        if focused.startswith(text):
            return
    raise AssertionError(f"Tab never reached {text!r}")


def _fits(page: Page) -> bool:
    return bool(page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"))


@pytest.mark.parametrize("width", [1280, 390])
def test_a_requester_starts_and_follows_a_request(
    page: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path, width: int
) -> None:
    deploy(DEMO.read_text())
    deploy(DESCRIBED)
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "requester", "requester", next="/tasks/")

    _tab_to(page, "New request")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.get_by_role("heading", name="New request", level=1).is_visible()
    assert "Ask for a purchase to be approved." in page.inner_text("main")
    _tab_to(page, "Purchase approval")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.get_by_role("heading", name="Purchase approval", level=1).is_visible()

    _tab_to(page, "Number")
    page.keyboard.type("PO-4711")
    _tab_to(page, "Total")
    page.keyboard.type("2400")
    _tab_to(page, "Requester")
    page.keyboard.type("Robin Requester")
    _tab_to(page, "Description")
    page.keyboard.type("Two standing desks for the new team room")
    assert _fits(page)
    if width == 1280:
        page.screenshot(path=str(_shots(tmp_path) / "new-request.png"), full_page=True)

    # a required field emptied: the form comes back with the error next to it, nothing starts
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    _tab_to(page, "Send request")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Nothing was started." in page.inner_text("main")
    assert page.locator("#f-start-payload-number-errors").inner_text() == "This field is required."
    assert page.input_value("#f-start-payload-total") == "2400"  # the rest is kept
    assert not Run.objects.exists()

    _tab_to(page, "Number")
    page.keyboard.type("PO-4711")
    _tab_to(page, "Send request")
    with page.expect_navigation():
        page.keyboard.press("Enter")

    assert page.url.endswith("/requests/")
    assert "Your request “Purchase approval” was started." in page.inner_text("main")
    run = Run.objects.get()
    assert run.actor_id == "requester"
    executor.drain(run_id=run.id, budget_seconds=10)
    page.reload()
    row = page.locator("tbody tr").first
    assert "Waiting" in row.inner_text() and "Approve purchase PO-4711" in row.inner_text()
    assert "approvers" in row.inner_text()
    assert _fits(page)
    if width == 1280:
        page.screenshot(path=str(_shots(tmp_path) / "my-requests.png"), full_page=True)

    _tab_to(page, "purchase-approval")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url.endswith(f"/requests/{run.id}/")
    assert "Approve purchase PO-4711" in page.inner_text("#waiting-for")
    assert page.locator("svg").count() >= 1 and _fits(page)
