"""The everyday pages checked by axe-core in Chromium, and two journeys done by keyboard only.

Issue #30 asks that an approver, a requester and an operator can use Switchyard with assistive
technology: every page they meet (sign-in, inbox, task form, New request, My requests, run
page, Migrate dialog, designer, ops dashboard and radar, the 404 page) has no serious or
critical axe-core violation at a desktop width and at a phone's, and a task and a migration can
be completed with Tab, Shift+Tab, Enter and Space alone (no mouse, no ``focus()`` shortcut).

axe-core is vendored under ``tests/support/static/`` and injected by ``tests/support/a11y.py``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.test_migrate_browser import deploy as deploy_inactive
from tests.engine import documents
from tests.engine.test_migration import REVISION_1, REVISION_2
from tests.support.a11y import assert_accessible
from tests.support.browser import login
from tests.support.waiting import eventually
from tests.views.test_requests import DEMO
from tests.views.test_tasks_pages import deploy, drain
from workflows import operations
from workflows.models import MigrationRecord, Park, Run, Task

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DIALOG = "/migrate/default/purchase-move/"


FOCUSED_NAME = """() => {
  const e = document.activeElement;
  const label = e.getAttribute("aria-label") || (e.labels && e.labels[0] ? e.labels[0].textContent : "");
  return (label || e.textContent || e.value || "").replace("*", "").replace(/\\s+/g, " ").trim();
}"""


def _tab_to(page: Page, name: str, *, limit: int = 80) -> None:
    """Press Tab until the focused element's label or text starts with ``name``."""
    seen = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        seen.append(page.evaluate(FOCUSED_NAME))
        if seen[-1].startswith(name):
            return
    raise AssertionError(f"Tab never reached {name!r}; it went through: {[s[:40] for s in seen]}")


@pytest.fixture(autouse=True)
def _no_confirmation_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # no worker drives the approval runs: the task page would wait for an executor
    monkeypatch.setattr("workflows.views.tasks.CONFIRM_WAIT_SECONDS", 0)


def _approval_task() -> Task:
    deploy(documents.APPROVAL)
    run_id = operations.start(
        definition_id="approval",
        business_key="PO-3001",
        payload={"number": "PO-3001", "total": 4800, "supplier": "Acme Tools", "lines": [{"item": "Drill", "qty": 2}]},
    ).run_id
    drain(run_id)
    return Task.objects.get(run_id=run_id)


def _parked_review_runs() -> list[str]:
    """Runs parked at review on revision 1; revision 2 renames the node (a migration to do)."""
    deploy_inactive(REVISION_1, activate=True)
    deploy_inactive(REVISION_2, activate=False)
    runs = [
        operations.start(definition_id="purchase-move", payload={"route": "review"}, business_key=f"PO-{i}").run_id
        for i in (1, 2)
    ]
    for run_id in runs:
        drain(run_id)
    return runs


def _htmx_idle(page: Page) -> None:
    """Wait until htmx has swapped and settled (its handlers are bound to the new content)."""
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-settling, .htmx-swapping')")


def _check(page: Page, path: str, what: str, failures: list[str]) -> None:
    page.goto(path)
    try:
        assert_accessible(page, what)
    except AssertionError as failure:
        failures.append(str(failure))


def _sign_in(page: Page, live_server: Any, username: str) -> None:
    page.context.clear_cookies()
    login(page, live_server, username, username)


@pytest.mark.parametrize("width", [1280, 390])
def test_every_everyday_page_has_no_serious_violation(
    page: Page, live_server: Any, demo_users: dict[str, Any], width: int
) -> None:
    task = _approval_task()
    deploy(DEMO.read_text())
    _parked_review_runs()
    page.set_viewport_size({"width": width, "height": 900})
    failures: list[str] = []

    _check(page, "/accounts/login/", "the sign-in page", failures)

    _sign_in(page, live_server, "requester")
    _check(page, "/requests/new/", "New request", failures)
    _check(page, "/requests/new/purchase-approval/", "the start form", failures)
    _check(page, "/requests/", "My requests", failures)

    _sign_in(page, live_server, "bob")
    _check(page, "/tasks/", "the inbox", failures)
    _check(page, f"/tasks/{task.id}/", "the task form", failures)
    _check(page, "/no-such-page/", "the 404 page", failures)

    _sign_in(page, live_server, "admin")
    _check(page, f"/runs/{task.run_id}/", "the run page", failures)
    _check(page, DIALOG, "the Migrate dialog", failures)
    page.get_by_role("button", name=re.compile(r"2 runs at review")).click()
    page.get_by_label("Select run PO-1").wait_for()
    try:
        assert_accessible(page, "the Migrate dialog with its run picker open")
    except AssertionError as failure:
        failures.append(str(failure))
    _check(page, "/designer/", "the designer's list", failures)
    _check(page, "/designer/default/approval/edit/", "the designer's editor", failures)
    _check(page, "/ops/", "the ops dashboard", failures)
    _check(page, "/ops/radar/", "the radar", failures)

    assert not failures, f"at {width} px:\n" + "\n".join(failures)


def _sign_in_by_keyboard(page: Page, username: str) -> None:
    page.goto("/accounts/login/?next=/tasks/")
    _tab_to(page, "Username")
    page.keyboard.type(username)
    _tab_to(page, "Password")
    page.keyboard.type(username)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url.endswith("/tasks/"), f"signing in as {username} by keyboard failed: {page.url}"


def test_an_approver_completes_a_task_by_keyboard_only(
    page: Page, live_server: Any, demo_users: dict[str, Any]
) -> None:
    task = _approval_task()
    _sign_in_by_keyboard(page, "alice")

    _tab_to(page, "Approve purchase PO-3001")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    _tab_to(page, "Claim")
    with page.expect_navigation():
        page.keyboard.press("Space")
    assert Task.objects.get(pk=task.pk).claimed_by == "alice"
    assert_accessible(page, "the task form of a claimed task")
    _tab_to(page, "Comment")
    page.keyboard.type("fine by me")
    _tab_to(page, "Approve")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Your decision “Approve” was recorded." in page.get_by_role("status").first.inner_text()
    drain(task.run_id)
    done = Task.objects.get(pk=task.pk)
    assert done.completed_by == "alice" and Run.objects.get(pk=task.run_id).status == "COMPLETED"


def test_an_operator_applies_a_migration_by_keyboard_only(
    celery_worker_process: Any, page: Page, live_server: Any, demo_users: dict[str, Any]
) -> None:
    deploy_inactive(REVISION_1, activate=True)
    deploy_inactive(REVISION_2, activate=False)
    runs = [
        operations.start(definition_id="purchase-move", payload={"route": "review"}, business_key=f"PO-{i}").run_id
        for i in (1, 2)
    ]
    eventually(
        lambda: Park.objects.filter(left_at__isnull=True).count() == 2,
        what="two runs parked at review",
        details=celery_worker_process.logs,
    )
    login(page, live_server, "admin", "admin", next=DIALOG)
    page.get_by_role("heading", name=re.compile("Migrate parked runs")).wait_for()

    _tab_to(page, "2 runs at review")
    page.keyboard.press("Enter")
    page.get_by_label("Select all 2 runs at this position").wait_for()
    _htmx_idle(page)
    _tab_to(page, "Select all 2 runs at this position")
    page.keyboard.press("Space")
    page.locator("#selected-0").filter(has_text="all 2").wait_for()
    _htmx_idle(page)
    assert page.evaluate("document.activeElement.id") == "all-0", "the swap kept the focus on the checkbox"
    _tab_to(page, "What to do with the runs selected at review")
    for _ in range(6):
        if page.locator("#do-0").input_value() == "move:manager-review":
            break
        page.keyboard.press("ArrowDown")
    assert page.locator("#do-0").input_value() == "move:manager-review"
    _tab_to(page, "Why")
    page.keyboard.type("reviews now go to the managers")
    _tab_to(page, "Preview")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Preview — nothing has changed yet").wait_for()
    assert_accessible(page, "the Migrate dialog with its preview")
    _tab_to(page, "Apply")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name=re.compile(r"Migration #\d+ is done")).wait_for(timeout=30_000)
    assert_accessible(page, "the migration's progress")

    record = MigrationRecord.objects.get()
    assert (record.status, record.created_by, record.reason) == ("DONE", "admin", "reviews now go to the managers")
    moved = Task.objects.filter(run_id__in=runs, status="OPEN")
    assert {t.step for t in moved} == {"manager-review"} and moved.count() == 2


def test_a_refused_decision_opens_at_its_first_marked_field_on_a_phone(
    page: Page, live_server: Any, demo_users: dict[str, Any]
) -> None:
    """The walk of a new user: a decision sent back with errors reloaded at the page's top, the
    marked field a screen and a half below, nothing in sight saying what went wrong."""
    task = _approval_task()
    page.set_viewport_size({"width": 390, "height": 844})
    _sign_in(page, live_server, "alice")
    page.goto(f"{live_server.url}/tasks/{task.id}/")
    page.get_by_label("Comment").fill("x" * 60)  # over the schema's maxLength of 50
    with page.expect_navigation():
        page.get_by_role("button", name="Approve", exact=True).click()

    focused = page.evaluate(
        """() => { const e = document.activeElement, box = e.getBoundingClientRect();
                   return {name: e.getAttribute("name"), invalid: e.getAttribute("aria-invalid"),
                           inView: box.top >= 0 && box.bottom <= window.innerHeight}; }"""
    )
    assert focused == {"name": "payload/comment", "invalid": "true", "inView": True}
    assert page.locator("#" + page.evaluate("() => document.activeElement.id") + "-errors").is_visible()
    assert Task.objects.get(pk=task.pk).status == "OPEN"  # nothing was recorded
