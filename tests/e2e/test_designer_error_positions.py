"""The designer in Chromium shows where a problem is: a YAML error and a CEL problem are listed
with their line and column, the editor marks the line, and a click on the problem puts the
cursor on that character."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from designer import services
from tests.support.browser import login

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CURSOR = """() => {
  const view = document.getElementById("id_text").switchyardEditor.view;
  const head = view.state.selection.main.head;
  const line = view.state.doc.lineAt(head);
  return [line.number, head - line.from + 1];
}"""


def _show(page: Page, text: str, where: str) -> Any:
    """Put ``text`` in the editor and wait for the live check to list a problem at ``where``."""
    page.evaluate("t => document.getElementById('id_text').switchyardEditor.setText(t)", text)
    problem = page.locator("#problems .problem-jump", has_text=where).first
    problem.wait_for()
    return problem


def test_problems_show_line_and_column_and_a_click_goes_there(page: Page, live_server: Any) -> None:
    account = get_user_model().objects.create_user("author", password="author", is_staff=True)
    account.user_permissions.add(
        Permission.objects.get(codename="change_definitionversion", content_type__app_label="workflows")
    )
    login(page, live_server, "author", "author", next="/designer/new/?template=approval")
    page.locator(".cm-editor .cm-content").wait_for()
    page.locator("#check-status", has_text="Compiles.").wait_for()
    template = services.template_text("approval")

    # a key indented where none is expected: the reason, line 18, column 3
    problem = _show(page, template.replace("initialStep:", "  initialStep:", 1), "Line 18, column 3")
    assert problem.get_attribute("data-column") == "3"
    assert "not valid YAML: " in page.locator("#problems").inner_text()
    assert page.locator(".cm-editor .cm-lint-marker-error").count() >= 1
    problem.click()
    assert page.evaluate(CURSOR) == [18, 3]

    # a CEL problem in a title's placeholder: the character of the document
    broken = template.replace('{{ state.number }}"\n    description', '{{ state.number + }}"\n    description', 1)
    line = next(i for i, ln in enumerate(broken.splitlines(), 1) if "state.number + }}" in ln)
    column = broken.splitlines()[line - 1].index("+ }}") + 1  # the last token the parser read
    problem = _show(page, broken, f"Line {line}, column {column}")
    assert "expression does not parse as CEL: column" in page.locator("#problems").inner_text()
    problem.click()
    assert page.evaluate(CURSOR) == [line, column]
