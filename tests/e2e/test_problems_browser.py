"""workflows/static/workflows/js/problems.js in Chromium on a page that declares no alert region (the inbox's
Refresh): a refusal is still shown, in a region made right after the control; a problem's
texts are text, never markup; a server out of reach is said so; the next request clears it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import login

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<img src="x" id="injected">'


def test_refusals_on_a_page_without_a_declared_region(page: Page, live_server: Any, demo_users: dict[str, Any]) -> None:
    login(page, live_server, "alice", "alice", next="/tasks/")
    refresh = page.get_by_role("button", name="Refresh")
    answer: dict[str, Any] = {}

    def refuse(route: Route) -> None:
        if route.request.headers.get("hx-request") != "true":
            route.continue_()
        elif answer.get("abort"):
            route.abort()
        else:
            route.fulfill(**answer)

    page.route("**/tasks/", refuse)

    answer.update(status=500, content_type="text/html", body="<h1>Server Error (500)</h1>")
    refresh.click()
    alert = page.locator("[data-problems-made] .problem")
    alert.wait_for()
    assert page.locator("[data-problems-made]").get_attribute("role") == "alert"
    assert alert.inner_text().startswith("The server failed")
    assert "Server Error" not in alert.inner_text()  # an HTML answer is never shown as such

    body = {"title": f"Refused {HOSTILE}", "detail": HOSTILE, "status": 409, "violations": [{"message": HOSTILE}]}
    answer.update(status=409, content_type="application/problem+json", body=json.dumps(body))
    refresh.click()
    alert.filter(has_text="Refused").wait_for()
    assert alert.locator(".problem-detail").inner_text() == HOSTILE
    assert alert.locator(".problem-violations li").inner_text() == HOSTILE
    assert page.locator("#injected").count() == 0

    answer["abort"] = True
    refresh.click()
    alert.filter(has_text="The server could not be reached").wait_for()
    assert page.locator("[data-problems-made]").count() == 1  # one region, reused

    page.unroute("**/tasks/")
    refresh.click()
    page.locator("#inbox-summary").filter(has_text="Nothing is waiting for you.").wait_for()
    assert page.locator("[data-problems-made] .problem").count() == 0  # cleared by the next request
