"""The site's sign-in page and base layout, in Chromium against live_server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import login

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def test_an_approver_signs_in_and_sees_the_navigation(page: Page, live_server: Any, demo_users: dict[str, Any]) -> None:
    login(page, live_server, "alice", "alice", next="/accounts/login/")

    nav = page.get_by_role("navigation", name="Main")
    assert [link.inner_text() for link in nav.locator("ul a").all()] == ["Inbox"]  # no page that would refuse her
    assert "Signed in as alice" in page.inner_text("header")


def test_staff_see_the_admin_link(page: Page, live_server: Any, demo_users: dict[str, Any]) -> None:
    login(page, live_server, "admin", "admin", next="/accounts/login/")

    assert page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").is_visible()


def test_a_wrong_password_is_refused_with_a_message(page: Page, live_server: Any, demo_users: dict[str, Any]) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")

    assert page.get_by_role("alert").inner_text().startswith("Your username and password didn't match")


def test_the_login_page_loads_its_stylesheet_and_htmx(page: Page, live_server: Any) -> None:
    page.goto(f"{live_server.url}/accounts/login/")

    assert page.evaluate("typeof window.htmx") == "object"
    background = page.evaluate("getComputedStyle(document.querySelector('.site-header')).backgroundColor")
    assert background == "rgb(29, 35, 43)"
