"""The Migrate dialog's panes in Chromium: the target revision's graph beside the source graph
with the current row's pick highlighted (redrawn when the pick changes), the digest checkbox
reached and ticked with the keyboard, a fork row's explanation, and the phone width (the graphs
stacked, no horizontal scroll).

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/migrate-dialog.png and
migrate-dialog-narrow.png; otherwise they go to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine.test_migration import FORK
from tests.support.a11y import assert_accessible
from tests.support.browser import login
from tests.views import test_migrate_dialog as dialog_tests
from workflows import definitions, operations
from workflows.engine import executor

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
parked = dialog_tests.parked  # the fixtures of the dialog's tests: runs parked at three positions
drain = dialog_tests.drain

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
DIALOG = "/migrate/default/purchase-move/"


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def no_horizontal_scroll(page: Page) -> bool:
    return bool(page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


def test_the_target_graph_follows_the_pick_and_the_digest_is_keyboard_reachable(
    parked: dict[str, list[str]], page: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    login(page, live_server, "admin", "admin", next=DIALOG)
    target = page.locator("#target-graph")
    target.wait_for()
    assert page.locator("svg.wfg").count() == 2
    # the first row (cool-off) keeps its id in revision 2: highlighted when the dialog opens
    assert target.locator("g.wfg-current").get_attribute("data-step") == "cool-off"
    assert target.locator("text.wfg-now").text_content() == "moves here"

    page.select_option("#do-1", "move:manager-review")  # the review row, to the renamed node
    target.locator('g.wfg-current[data-step="manager-review"]').wait_for()
    assert target.locator("g.wfg-current").count() == 1
    assert "Runs selected at review move to manager-review" in page.locator("#target-graph-caption").inner_text()
    page.select_option("#do-2", "end")
    page.locator("#target-graph-caption").filter(has_text="are ended (completed)").wait_for()
    assert target.locator("g.wfg-current").count() == 0
    page.select_option("#do-1", "move:manager-review")
    target.locator('g.wfg-current[data-step="manager-review"]').wait_for()

    # the digest checkbox is the next stop after "Why", and Space ticks it
    page.locator("#reason").click()
    page.keyboard.type("reviews now go to the managers")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "notify-digest"
    page.keyboard.press("Space")
    assert page.locator("#notify-digest").is_checked()
    assert_accessible(page, "the Migrate dialog with both graphs")
    page.screenshot(path=str(_shots(tmp_path) / "migrate-dialog.png"), full_page=True)

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    target.wait_for()
    assert no_horizontal_scroll(page)
    source_box = page.locator(".graphs > .graph-card").nth(0).bounding_box()
    target_box = page.locator(".graphs > .graph-card").nth(1).bounding_box()
    assert source_box and target_box and target_box["y"] >= source_box["y"] + source_box["height"]  # stacked
    page.select_option("#do-1", "move:manager-review")
    target.locator('g.wfg-current[data-step="manager-review"]').wait_for()
    assert no_horizontal_scroll(page)
    # the graph is wider than its frame here: the frame scrolls the highlighted node into view
    page.wait_for_function(
        """() => { const f = document.querySelector('#target-graph .graph-wrap').getBoundingClientRect();
            const n = document.querySelector('#target-graph .wfg-current').getBoundingClientRect();
            return n.left >= f.left && n.right <= f.right; }"""
    )
    assert_accessible(page, "the Migrate dialog at 390 px")
    page.screenshot(path=str(_shots(tmp_path) / "migrate-dialog-narrow.png"), full_page=True)


def test_a_fork_row_explains_why_move_is_not_offered(
    db: None, page: Page, live_server: Any, demo_users: dict[str, Any]
) -> None:
    for v, activate in ((1, True), (2, False)):
        ref = definitions.load(scope="default", text=FORK.format(v=v), format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(scope="default", definition_id="fork-move", version=v, target_scope="default")
    operations.start(definition_id="fork-move", payload={})
    executor.drain(budget_seconds=10)
    login(page, live_server, "admin", "admin", next="/migrate/default/fork-move/?source=1&target=2")
    why = page.locator("#why-0")
    why.wait_for()
    assert "the engine refuses to move a run with active branches" in why.inner_text()
    assert page.locator("#do-0").get_attribute("aria-describedby") == "why-0"
    enabled = page.locator("#do-0 option:not([disabled])").evaluate_all("options => options.map(o => o.value)")
    assert enabled == ["", "cancel", "end"]
    page.select_option("#do-0", "end")
    page.locator("#target-graph-caption").filter(has_text="are ended (completed)").wait_for()
    page.set_viewport_size({"width": 390, "height": 844})
    assert why.is_visible() and no_horizontal_scroll(page)
