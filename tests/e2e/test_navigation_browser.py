"""Signing out and in again, the navigation and the error pages, in Chromium (issue #30).

An approver signs out from the navigation, lands on the signed-out page and signs in again
through its link; an operator sees only the links of the pages they may open and meets the
403 and 404 pages. Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/signed-out.png,
forbidden.png and not-found.png; otherwise the screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import Permission, User

from tests.support.browser import login

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDE, NARROW = {"width": 1280, "height": 720}, {"width": 390, "height": 844}


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def _nav(page: Page) -> list[str]:
    return [link.inner_text() for link in page.get_by_role("navigation", name="Main").locator("ul a").all()]


def _operator() -> None:
    oscar = User.objects.create_user("oscar", password="oscar")
    for codename in ("change_command", "view_run"):
        oscar.user_permissions.add(Permission.objects.get(content_type__app_label="workflows", codename=codename))


def test_an_approver_signs_out_from_the_keyboard_and_signs_in_again(
    page: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    page.set_viewport_size(WIDE)
    login(page, live_server, "alice", "alice", next="/tasks/")
    assert _nav(page) == ["Inbox"]

    focused = []
    for _ in range(4):  # skip link, brand, Inbox, Sign out
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert focused == ["Skip to content", "Switchyard", "Inbox", "Sign out"]
    with page.expect_navigation():
        page.keyboard.press("Enter")

    assert page.url == f"{live_server.url}/accounts/signed-out/"
    assert page.get_by_role("heading", level=1).inner_text() == "You have signed out"
    assert _nav(page) == []
    page.screenshot(path=str(_shots(tmp_path) / "signed-out.png"))
    page.set_viewport_size(NARROW)
    page.screenshot(path=str(tmp_path / "signed-out-narrow.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]

    page.get_by_role("link", name="Sign in again").click()
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice")
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert page.url == f"{live_server.url}/tasks/"
    assert "Signed in as alice" in page.inner_text("header")


def test_an_operator_sees_their_links_and_the_403_and_404_pages(page: Page, live_server: Any, tmp_path: Path) -> None:
    _operator()
    page.set_viewport_size(WIDE)
    login(page, live_server, "oscar", "oscar", next="/ops/")
    assert _nav(page) == ["Inbox", "Runs", "Ops"]
    assert page.get_by_role("link", name="Ops").get_attribute("aria-current") == "page"

    response = page.goto(f"{live_server.url}/designer/")
    assert response is not None and response.status == 403
    assert page.get_by_role("heading", level=1).inner_text() == "You can't open this page"
    assert "permission workflows.view_definitionversion" in page.inner_text("main")
    page.screenshot(path=str(_shots(tmp_path) / "forbidden.png"))

    response = page.goto(f"{live_server.url}/no-such-page/")
    assert response is not None and response.status == 404
    assert page.get_by_role("heading", level=1).inner_text() == "Page not found"
    page.screenshot(path=str(_shots(tmp_path) / "not-found.png"))
    page.set_viewport_size(NARROW)
    page.screenshot(path=str(tmp_path / "not-found-narrow.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]

    page.get_by_role("link", name="Go to your inbox").click()
    assert page.url == f"{live_server.url}/tasks/"
