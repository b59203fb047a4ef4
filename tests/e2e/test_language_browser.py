"""An approver with a German browser works in German; an English browser keeps English.

Chromium's ``locale`` sets the Accept-Language header and ``navigator.language``; the site
picks German from it (``LocaleMiddleware``) and says so in ``<html lang>``. The walk: sign in,
inbox, task page, claim, decision, run page, sign-out page. At each stop the visible chrome
(navigation, headings, labels, buttons, messages) must hold the German words and none of the
English ones it replaces; what a workflow's author wrote (task titles, decision labels, field
names of the state) stays as written. axe-core still finds no serious violation in German.

Screenshots of the German inbox and task page at desktop and phone width land in the test's
temporary folder (``SWITCHYARD_SCREENSHOTS=<dir>`` keeps them there instead).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import Permission

from tests.engine import documents
from tests.support.a11y import assert_accessible
from tests.support.browser import login
from tests.views.test_tasks_pages import deploy, drain
from workflows import operations
from workflows.models import Run, Task

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# English chrome the German pages must not show (none of these is a German word as well)
ENGLISH = (
    "Skip to content",
    "Signed in as",
    "Sign out",
    "Your tasks",
    "Show tasks",
    "open task",
    "Business key",
    "Assigned to",
    "Opened",
    "Your decision",
    "Run status",
    "Claim it so",
    "Back to your inbox",
    "was recorded",
    "Command queue",
    "Timeline",
    "Where it waited",
    "Current state",
    "You have signed out",
    "Sign in again",
)


# labels, headings and controls whose text runs out of their box (a long word that cannot wrap)
SPILLING = """() => Array.from(document.querySelectorAll("dt, dd, th, td, label, button, .button, h1, h2, h3, .chip"))
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1
               && getComputedStyle(e).overflowX === "visible")
  .map(e => e.tagName.toLowerCase() + ": " + e.textContent.trim().slice(0, 40))"""


@pytest.fixture(autouse=True)
def _no_confirmation_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # no worker drives the run here: the task page would wait for an executor
    monkeypatch.setattr("workflows.views.tasks.CONFIRM_WAIT_SECONDS", 0)


@pytest.fixture
def german(browser: Browser, live_server: Any) -> Any:
    context = browser.new_context(base_url=live_server.url, locale="de-DE")
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def _shots() -> Path | None:
    folder = os.environ.get("SWITCHYARD_SCREENSHOTS")
    return Path(folder) if folder else None


def _task() -> Task:
    deploy(documents.APPROVAL)
    run_id = operations.start(
        definition_id="approval",
        business_key="PO-4711",
        payload={"number": "PO-4711", "total": 4800},
    ).run_id
    drain(run_id)
    return Task.objects.get(run_id=run_id)


def _visible(page: Page) -> str:
    return page.locator("body").inner_text()


def _german(page: Page, where: str, *expected: str) -> None:
    text = _visible(page)
    missing = [w for w in expected if w not in text]
    leftovers = [w for w in ENGLISH if w in text]
    assert not missing, f"{where}: German words missing: {missing}"
    assert not leftovers, f"{where}: English left in the German page: {leftovers}"
    assert page.locator("html").get_attribute("lang") == "de", where


def _screenshot(page: Page, folder: Path, name: str) -> None:
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=True)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{name} at {width} px is wider than the screen by {overflow} px (long German words?)"
        spilling = page.evaluate(SPILLING)
        assert not spilling, f"{name} at {width} px: text wider than its box (long German words?): {spilling}"
    page.set_viewport_size({"width": 1280, "height": 900})


def test_an_approver_with_a_german_browser_works_in_german(
    german: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    page = german
    folder = _shots() or tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    task = _task()
    demo_users["alice"].user_permissions.add(Permission.objects.get(codename="view_run"))

    page.goto("/accounts/login/")
    _german(page, "the sign-in page", "Anmelden", "Benutzername", "Passwort")
    login(page, live_server, "alice", "alice", next="/tasks/")

    _german(page, "the inbox", "Ihre Aufgaben", "Posteingang", "Abmelden", "Aufgaben zeigen", "1 offene Aufgabe")
    assert "Approve purchase PO-4711" in _visible(page)  # the author's words stay
    assert_accessible(page, "the German inbox")
    _screenshot(page, folder, "inbox-de")

    page.get_by_role("link", name="Approve purchase PO-4711").click()
    _german(page, "the task page", "Ihre Entscheidung", "Zugewiesen an Gruppe", "Laufstatus", "Übernehmen")
    assert_accessible(page, "the German task page")
    _screenshot(page, folder, "task-de")

    with page.expect_navigation():
        page.get_by_role("button", name="Übernehmen").click()
    _german(page, "the claimed task", "Sie haben diese Aufgabe übernommen", "Freigeben")
    assert Task.objects.get(pk=task.pk).claimed_by == "alice"

    page.get_by_label("Comment").fill("passt")
    with page.expect_navigation():
        page.get_by_role("button", name="Approve").click()
    _german(page, "the decided task", "Ihre Entscheidung „Approve“ wurde aufgezeichnet.", "Zurück zum Posteingang")
    drain(task.run_id)
    assert Run.objects.get(pk=task.run_id).status == "COMPLETED"

    page.goto(f"/runs/{task.run_id}/")
    run_words = ("Abgeschlossen", "Zeitleiste", "Befehlswarteschlange", "Aufgabe erledigt", "Gestartet")
    _german(page, "the run page", *run_words)
    assert_accessible(page, "the German run page")
    _screenshot(page, folder, "run-de")  # the graph's German step types ("Benutzeraufgabe") included

    with page.expect_navigation():
        page.get_by_role("button", name="Abmelden").click()
    _german(page, "the signed-out page", "Sie haben sich abgemeldet", "Wieder anmelden")


def test_an_english_browser_keeps_english(page: Page, live_server: Any, demo_users: dict[str, Any]) -> None:
    _task()
    login(page, live_server, "bob", "bob", next="/tasks/")
    text = _visible(page)
    assert page.locator("html").get_attribute("lang") == "en"
    assert "Your tasks" in text and "Sign out" in text and "1 open task" in text
    assert "Ihre Aufgaben" not in text and "Abmelden" not in text
