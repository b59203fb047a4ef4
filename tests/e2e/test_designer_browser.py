"""The designer in Chromium: from a template to a deployed revision and the Migrate dialog.

Version 1 of the workflow is deployed through ``workflows.definitions`` and a run is drained
to its approval with the in-process executor, so a run is parked on the revision the
designer's deploy replaces.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/designer*.png; otherwise the
screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from designer import services
from tests.support.browser import login
from workflows import definitions, operations
from workflows.engine import executor
from workflows.models import DefinitionVersion, Run

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def _author() -> None:
    account = get_user_model().objects.create_user("author", password="author", is_staff=True)
    account.user_permissions.add(
        Permission.objects.get(codename="change_definitionversion", content_type__app_label="workflows")
    )


def _deploy_v1_with_a_parked_run() -> str:
    text = services.template_text("approval")
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")
    recorded = operations.start(
        definition_id="approval", business_key="REQ-7", payload={"number": "REQ-7", "total": 120}
    )
    executor.drain(budget_seconds=10)
    assert Run.objects.get(pk=recorded.run_id).current_step == "review"
    return str(recorded.run_id)


def _editor_text(page: Page) -> str:
    return str(page.locator("#id_text").input_value())


def test_from_template_to_deploy_and_the_migrate_dialog(page: Page, live_server: Any, tmp_path: Path) -> None:
    _deploy_v1_with_a_parked_run()
    _author()
    shots = _shots(tmp_path)

    login(page, live_server, "author", "author", next="/designer/")
    row = page.locator('tr[data-workflow="default/approval"]')
    assert "v1 available · current · 1 parked" in " ".join(row.inner_text().split())
    page.screenshot(path=str(shots / "designer-list.png"), full_page=True)

    # start from the Approval template: the document in the code editor, its graph beside it
    page.get_by_role("link", name=re.compile("^Approval One approver")).click()
    page.wait_for_url("**/designer/new/?template=approval")
    page.locator(".cm-editor .cm-content").wait_for()
    # YAML highlighting: keys and values are drawn in different styles
    key_colour = (
        page.locator(".cm-line", has_text="definitionId: approval")
        .locator("span")
        .first.evaluate("e => getComputedStyle(e).color")
    )
    assert key_colour != page.locator(".cm-content").evaluate("e => getComputedStyle(e).color")
    page.locator('#graph [data-step="review"]').wait_for()
    assert "Compiles." in page.locator("#check-status").inner_text()

    # add a human-task step through the form, connected after the approval
    page.select_option("#add-step-type", "human-task")
    page.click("#add-step-button")
    form = page.locator("#step-form")
    form.wait_for()
    form.locator("[name=step_id]").fill("finance-check")
    form.locator("[name=f_title]").fill("Finance check of {{ state.number }}")
    page.locator("#status-f_title", has_text="compiles").wait_for()  # checked as typed
    form.locator("[name=f_assignment__mode]").select_option("group")
    form.locator("[name=f_assignment__value]").fill("finance")
    form.locator("[name=connect_from]").select_option("review|decisions/0/next")
    form.locator("[name=decisions_0_name]").fill("approve")
    form.locator("[name=decisions_0_next]").fill("approved")
    form.locator("[name=decisions_1_name]").fill("reject")
    form.locator("[name=decisions_1_next]").fill("rejected")
    form.locator("[name=decisions_1_set]").fill('{"status": results.nope}')  # a CEL mistake, flagged as typed
    page.locator("#status-decisions_1_set", has_text="allowed:").wait_for()
    form.locator("[name=decisions_1_set]").fill('{"status": "rejected by finance"}')
    page.locator("#status-decisions_1_set", has_text="compiles").wait_for()
    page.screenshot(path=str(shots / "designer-step-form.png"), full_page=True)
    # a refused form comes back with its errors next to the fields
    form.locator("[name=f_due__after]").fill("3 days")
    form.locator("[name=f_due__next]").fill("rejected")
    page.click("#write-step-button")
    page.locator("#step-form .field-error", has_text="ISO-8601 duration").wait_for()
    assert "finance-check" not in _editor_text(page)
    form.locator("[name=f_due__after]").fill("")
    form.locator("[name=f_due__next]").fill("")
    page.click("#write-step-button")
    page.locator("#step-done").wait_for()

    # it appears in the document and in the graph
    page.locator('#graph [data-step="finance-check"]').wait_for()
    text = _editor_text(page)
    assert "- id: finance-check" in text and "# Approval: one person" in text
    edge = page.locator('#graph path[data-source="review"][data-target="finance-check"]')
    assert edge.count() == 1
    # a click on the step in the graph opens its form, filled from the document
    page.locator('#graph [data-step="finance-check"]').click()
    page.locator("#step-form-heading", has_text="Edit step finance-check").wait_for()
    assert page.locator("#step-form [name=f_assignment__value]").input_value() == "finance"
    page.get_by_role("button", name="Close").click()

    # introduce an error: it is flagged at its line
    page.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.type("bogus: true")
    problem = page.locator("#problems .problem-jump").first
    problem.wait_for()
    line = next(i for i, ln in enumerate(_editor_text(page).splitlines(), 1) if "bogus: true" in ln)
    assert problem.get_attribute("data-line") == str(line)
    assert f"Line {line}" in problem.inner_text()
    assert "unknown field" in page.locator("#problems").inner_text()
    assert page.locator(".cm-editor .cm-lint-marker-error").count() >= 1
    assert "last document that compiled" in page.locator("#graph-note").inner_text()
    page.screenshot(path=str(shots / "designer-problem.png"), full_page=True)

    # fix it: the problem's pointer takes the editor to the line, which is then deleted
    problem.click()
    selected = page.evaluate("() => window.getSelection().toString()")
    assert "bogus: true" in selected
    page.keyboard.press("Backspace")
    page.locator("#check-status", has_text="Compiles.").wait_for()
    assert "bogus" not in _editor_text(page)
    assert page.locator("#problems").count() == 0
    assert "version 2" in page.locator("#check-status").inner_text()
    page.screenshot(path=str(shots / "designer-editor.png"), full_page=True)

    # deploy: minted as version 2, published, activated; one run parked on version 1
    with page.expect_navigation():
        page.click("#deploy-button")
    assert re.search(r"/migrate/default/approval/\?source=1&target=2$", page.url), page.url
    assert page.locator("#source").input_value() == "1"
    assert page.locator("#target").input_value() == "2"
    assert "Deployed approval version 2" in page.locator(".messages").inner_text()
    deployed = DefinitionVersion.objects.get(scope="default", definition_id="approval", version=2)
    assert deployed.status == "AVAILABLE" and "finance-check" in deployed.text
    assert [a.version for a in definitions.activations(scope="default") if a.definition_id == "approval"] == [2]
    page.screenshot(path=str(shots / "designer-migrate.png"), full_page=True)

    # closing the dialog leaves the backlog where it is
    page.goto(f"{live_server.url}/designer/default/approval/")
    assert page.locator("table.revisions-table tbody tr").count() == 2
    assert page.locator('tr[data-version="1"] td.parked').inner_text().strip() == "1"
    assert page.locator('tr[data-version="1"] a.migrate-link').get_attribute("href") == (
        "/migrate/default/approval/?source=1&target=2"
    )

    # the two revisions side by side
    page.goto(f"{live_server.url}/designer/default/approval/compare/?a=1&b=2")
    added = page.locator(".step-changes li.change-added")
    assert " ".join(added.inner_text().split()).endswith("finance-check (human-task)")
    assert page.locator('.side-by-side g.dsg-added[data-step="finance-check"]').count() == 1
    page.screenshot(path=str(shots / "designer-compare.png"), full_page=True)
