"""The designer's editor in Chromium: a wide graph stays inside its pane (and zooms from the
keyboard), and edits that are not deployed are not lost without a question (issue #30)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from tests.support.browser import login
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE_ROUTES = 14


def _author() -> None:
    account = get_user_model().objects.create_user("author", password="author", is_staff=True)
    account.user_permissions.add(
        Permission.objects.get(codename="change_definitionversion", content_type__app_label="workflows")
    )


def _wide_document() -> str:
    """A decision with many routes: a graph far wider than a phone (or a laptop's pane)."""
    routes = "\n".join(f'      - {{when: "state.n == {i}", to: end{i}}}' for i in range(WIDE_ROUTES))
    ends = "\n".join(f"  - {{id: end{i}, type: complete}}" for i in range(WIDE_ROUTES))
    return (
        "definitionId: wide\ndefinitionVersion: 1\ncontract: {name: wide.v1}\ninitialStep: route\nsteps:\n"
        f"  - id: route\n    type: decision\n    routes:\n{routes}\n    default: end0\n{ends}\n"
    )


def _open_editor_with(page: Page, live_server: Any, text: str) -> None:
    login(page, live_server, "author", "author", next="/designer/new/?template=approval")
    page.locator(".cm-editor .cm-content").wait_for()
    page.locator("#id_text").evaluate("(t, text) => t.switchyardEditor.setText(text)", text)
    page.locator('#graph [data-step="end13"]').wait_for()


def _svg_width(page: Page) -> float:
    return float(page.locator("#graph svg").evaluate("s => s.getBoundingClientRect().width"))


def test_a_wide_graph_scrolls_and_zooms_inside_its_pane_on_a_phone(
    browser: Browser, live_server: Any, tmp_path: Path
) -> None:
    _author()
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 844})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        _open_editor_with(page, live_server, _wide_document())
        natural = float(page.locator("#graph svg").get_attribute("width") or 0)
        assert natural > 390
        # fitted by default: the page does not scroll sideways, the graph fits its pane
        eventually(
            lambda: page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"),
            what="the page is no wider than the phone",
        )
        pane = page.locator("#graph").bounding_box()
        assert pane is not None and pane["x"] + pane["width"] <= 390
        fitted = _svg_width(page)
        assert fitted <= pane["width"]
        page.screenshot(path=str(tmp_path / "designer-wide-phone.png"), full_page=False)

        # keyboard only: Tab reaches "Zoom in", Enter zooms; the pane scrolls, the page does not
        zoom_in = page.get_by_role("button", name="Zoom in")
        zoom_in.focus()
        page.keyboard.press("Enter")
        page.keyboard.press("Enter")
        assert _svg_width(page) > fitted
        level = page.locator(".graph-zoom [data-zoom-level]").inner_text()
        assert level.endswith("%") and level != f"{round(fitted / natural * 100)}%"
        page.locator("#graph").focus()
        page.keyboard.press("0")  # natural size
        assert abs(_svg_width(page) - natural) < 2
        assert page.locator("#graph").evaluate("p => p.scrollWidth > p.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.keyboard.press("f")
        assert abs(_svg_width(page) - fitted) < 2
        page.screenshot(path=str(tmp_path / "designer-wide-phone-zoomed.png"), full_page=True)
    finally:
        context.close()


def test_leaving_with_edits_that_are_not_deployed_asks_first(page: Page, live_server: Any) -> None:
    _author()
    login(page, live_server, "author", "author", next="/designer/new/?template=approval")
    page.locator(".cm-editor .cm-content").wait_for()
    dialogs: list[str] = []

    def answer(dialog: Any) -> None:
        dialogs.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", answer)

    # untouched: leaving asks nothing
    page.get_by_role("link", name="Designer").first.click()
    page.wait_for_url("**/designer/")
    assert dialogs == []

    page.goto("/designer/new/?template=approval")
    page.locator(".cm-editor .cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\n# a note\n")
    page.get_by_role("link", name="Designer").first.click()
    eventually(lambda: dialogs == ["beforeunload"], what="the browser asks before the edits are lost")
    assert "/designer/new/" in page.url  # dismissed: still editing, the note still there
    assert "# a note" in page.locator("#id_text").input_value()

    # Deploy saves: no question on the way to the workflow's page
    page.click("#deploy-button")
    page.wait_for_url("**/designer/default/approval/")
    assert dialogs == ["beforeunload"]
