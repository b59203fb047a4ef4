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
