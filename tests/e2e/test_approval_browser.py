"""An approval from start to finish: a real Celery worker runs the workflow, an approver
decides in Chromium.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/inbox.png and task-form.png;
otherwise the screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine import documents
from tests.support.browser import login
from tests.support.waiting import eventually
from workflows import definitions, operations
from workflows.models import Command, Run, Task

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def deploy(text: str) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def test_an_approver_decides_in_the_browser_and_the_run_completes(
    celery_worker_process: Any, page: Page, live_server: Any, demo_users: dict[str, Any], tmp_path: Path
) -> None:
    deploy(documents.APPROVAL)
    payloads = [
        (
            "PO-1001",
            {
                "number": "PO-1001",
                "total": 4800,
                "supplier": "Acme Tools",
                "lines": [{"item": "Cordless drill", "qty": 12}, {"item": "Bit set", "qty": 12}],
            },
        ),
        ("PO-1002", {"number": "PO-1002", "total": 1250, "supplier": "Northwind"}),
    ]
    runs = [operations.start(definition_id="approval", business_key=key, payload=p).run_id for key, p in payloads]
    tasks = eventually(
        lambda: (
            list(Task.objects.filter(run_id__in=runs, status="OPEN"))
            if Task.objects.filter(run_id__in=runs, status="OPEN").count() == 2
            else None
        ),
        timeout=30,
        what="both runs to open their tasks",
        details=celery_worker_process.logs,
    )
    task = next(t for t in tasks if str(t.run_id) == str(runs[0]))

    # someone outside the group does not even learn that the task exists
    outsider = page.context.browser.new_context(base_url=live_server.url)
    try:
        other = outsider.new_page()
        login(other, live_server, "requester", "requester", next="/tasks/")
        assert "Nothing is waiting for you" in other.inner_text("#inbox")
        assert other.goto(f"{live_server.url}/tasks/{task.id}/").status == 404
    finally:
        outsider.close()

    login(page, live_server, "alice", "alice", next="/tasks/")
    inbox = page.locator("#inbox")
    assert "2 open tasks" in inbox.inner_text()
    page.screenshot(path=str(_shots(tmp_path) / "inbox.png"), full_page=True)

    page.get_by_role("link", name="Approve purchase PO-1001").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Approve purchase PO-1001"
    assert "Acme Tools" in page.inner_text(".task-context")
    page.screenshot(path=str(_shots(tmp_path) / "task-form.png"), full_page=True)

    # a comment over the schema's maxLength: refused on the server, shown next to the field
    approve = page.locator("form.decision").filter(has=page.get_by_role("button", name="Approve"))
    approve.get_by_label("Comment").fill("x" * 60)
    approve.get_by_role("button", name="Approve").click()
    assert page.locator("#f-approve-payload-comment-errors").inner_text() == "Use at most 50 characters."
    assert page.get_by_label("Comment").input_value() == "x" * 60
    assert not Command.objects.filter(run_id=task.run_id, kind="COMPLETION").exists()
    assert Task.objects.get(pk=task.pk).status == "OPEN"

    page.get_by_label("Comment").fill("Within budget")
    page.get_by_role("button", name="Approve").click()
    assert "Your decision “Approve” was recorded." in page.get_by_role("status").first.inner_text()
    assert page.locator("form.decision").count() == 0

    eventually(
        lambda: Run.objects.get(pk=task.run_id).status == "COMPLETED",
        timeout=30,
        what="the run to complete",
        details=celery_worker_process.logs,
    )
    run = Run.objects.get(pk=task.run_id)
    assert run.state["approved"] is True
    completed = Task.objects.get(pk=task.pk)
    assert completed.status == "COMPLETED" and completed.decision == "approve" and completed.completed_by == "alice"
    assert Command.objects.filter(run_id=task.run_id, kind="COMPLETION").count() == 1
    page.reload()
    assert "Completed" in page.inner_text("#run-status")
