"""The Migrate dialog's background apply of 2,000 runs in Chromium, with a real Celery worker
and beat, as an operator sees it: one press of Apply, the progress bar advancing, the worker
killed (SIGKILL) in the middle of it and a new one started, and the same page — nobody presses
anything, the card polls — ending with the migration done and 2,000 runs moved, each exactly
once.

The runs are parked by the Migrate benchmark's bulk SQL (``tests/support/bulk_migration.py``);
the workers hold 6 s leases (tests/conftest.py), so the sweep hands the record to a new task a
few seconds after the kill. The same crash without a browser:
tests/engine/test_e2e_migrate_background.py.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import bulk_migration
from tests.support.browser import login
from tests.support.bulk_migration import AT_REVIEW, item_statuses
from tests.support.waiting import eventually
from workflows.models import MigrationRecord

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DONE_TEXT = re.compile(r"^(\d+) of (\d+) runs done")


def test_an_operator_sees_2000_runs_moved_through_a_killed_worker(
    celery_worker_process: Any, crash_celery_worker: Any, page: Page, live_server: Any, django_user_model: Any
) -> None:
    bulk_migration.park()  # a third at each position: 2,000 at the approval
    assert bulk_migration.parked_at_review() == AT_REVIEW
    # no demo users: bob, the new approvals' assignee, does not exist, so the move writes no
    # 2,000 notices for the worker to deliver (as in the engine test)
    django_user_model.objects.create_superuser(username="operator", email="operator@example.com", password="operator")

    login(page, live_server, "operator", "operator", next="/admin/workflows/definitionversion/")
    page.get_by_role("link", name=re.compile(rf"^Migrate\b.*\({3 * AT_REVIEW} parked\)$")).click()
    page.get_by_role("heading", name=re.compile("Migrate parked runs")).wait_for()
    assert page.locator("#source").input_value() == "1" and page.locator("#target").input_value() == "2"
    count_button = page.get_by_role("button", name=re.compile(rf"^{AT_REVIEW} runs at review\b"))
    row = str(count_button.get_attribute("aria-controls")).removeprefix("picker-")
    count_button.click()
    page.get_by_label(f"Select all {AT_REVIEW} runs at this position").check()
    page.locator(f"#selected-{row}").filter(has_text=f"all {AT_REVIEW}").wait_for()
    page.select_option(f"#do-{row}", "move:manager-review")
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("section.preview")
    preview.get_by_role("heading", name="Preview — nothing has changed yet").wait_for()
    # a batch this large is confirmed by typing its number back
    preview.get_by_label(f"This batch has {AT_REVIEW} runs. Type {AT_REVIEW} to confirm.").fill(str(AT_REVIEW))
    preview.get_by_role("button", name="Apply").click()

    card = page.locator("#migration-progress-card")
    card.get_by_role("heading", name=re.compile(r"Applying migration #\d+")).wait_for()
    record = MigrationRecord.objects.get()
    assert (record.background, record.total) == (True, AT_REVIEW)

    seen: list[int] = []  # every "N of 2000 runs done" the page showed, in the order shown

    def done_on_page() -> int:
        text = page.locator("#progress-text").inner_text()
        match = DONE_TEXT.match(text)
        assert match and int(match[2]) == AT_REVIEW, f"the progress reads {text!r}"
        if not seen or seen[-1] != int(match[1]):
            seen.append(int(match[1]))
        return int(match[1])

    # the bar advances (the card polls every second) ...
    eventually(
        lambda: done_on_page() == AT_REVIEW or len([n for n in seen if n > 0]) >= 2,
        timeout=120,
        interval=0.05,
        what="the bar to advance twice",
        details=celery_worker_process.logs,
    )
    assert seen[-1] < AT_REVIEW, f"the apply finished before the kill; the page showed {seen}"
    # ... and the worker dies in the middle of the apply
    crash_celery_worker(restart=False)
    at_kill = item_statuses(record.id)
    assert at_kill["MOVED"] >= seen[-1] and at_kill["SELECTED"] > 0, f"not in the middle at the kill: {at_kill}"
    assert MigrationRecord.objects.get(pk=record.id).status == "APPLYING"
    celery_worker_process.start_worker()

    # nobody presses anything: the lapsed lease is swept to a new task, and the page follows
    eventually(
        lambda: done_on_page() == AT_REVIEW,
        timeout=240,
        interval=0.1,
        what="the page to show every run done",
        details=celery_worker_process.logs,
    )
    # every run is moved; the record is marked done by the task that finds nothing left, which
    # may be the next one the sweep hands it to: wait for that in the database, then the page
    # (it polls every second) says so
    eventually(
        lambda: MigrationRecord.objects.get(pk=record.id).status == "DONE",
        timeout=120,
        what="the record to be marked done",
        details=celery_worker_process.logs,
    )
    card.get_by_role("heading", name=f"Migration #{record.id} is done").wait_for()
    assert page.locator("#progress-text").inner_text() == f"{AT_REVIEW} of {AT_REVIEW} runs done (100%)"
    assert page.locator("#migration-progress").get_attribute("value") == str(AT_REVIEW)
    assert card.locator(".outcome").all_inner_texts() == [f"{AT_REVIEW} moved"]
    assert seen == sorted(set(seen)), f"the bar went back: {seen}"  # two steps before the kill, then on to 2,000

    # every run moved exactly once: one WORKFLOW_MIGRATED entry each, none missing, one new
    # approval each (none opened twice), all at the renamed node of revision 2
    assert MigrationRecord.objects.get(pk=record.id).status == "DONE"
    assert bulk_migration.moved_runs(record.id) == {
        "items": {"MOVED": AT_REVIEW},
        "migrated entries per run": {1: AT_REVIEW},
        "open approvals at the target": AT_REVIEW,
        "runs at the target": AT_REVIEW,
    }
