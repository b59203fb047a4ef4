"""The progress card of a background migration through Django's test client: the live poll,
the confirmed pause/resume/close controls, their refusals, and Preview refusing runs frozen in
another open migration (the browser flow is tests/e2e/test_migrate_background_browser.py)."""

# ruff: noqa: F811  (the fixtures parked and drain are imported from the dialog's tests)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tests.views.test_migrate_dialog import DIALOG, admin_client, drain, form, parked  # noqa: F401
from tests.views.test_migrate_problems import HTMX
from workflows import operations
from workflows.models import MigrationRecord

pytestmark = pytest.mark.django_db(transaction=True)


def applying(client: Client) -> MigrationRecord:
    client.post(f"{DIALOG}preview/", form(review=("end", "all")))
    record = MigrationRecord.objects.get()
    client.post(f"/migrate/records/{record.id}/apply/")
    record.refresh_from_db()
    assert record.status == "APPLYING" and record.background
    return record


def test_the_live_poll_answers_the_bar_and_the_whole_card_when_the_status_changed(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = applying(client)
    live = client.get(f"/migrate/records/{record.id}/progress/?part=live&seen=APPLYING&on=dialog", **HTMX)
    page = live.content.decode()
    assert page.startswith('<div id="progress-live"') and 'hx-trigger="load delay:1s"' in page
    assert "migration-controls" not in page and "hx-swap-oob" not in page  # the controls are not re-drawn
    operations.migration_pause(record_id=record.id, actor=demo_users["admin"])
    changed = client.get(f"/migrate/records/{record.id}/progress/?part=live&seen=APPLYING&on=dialog", **HTMX)
    assert changed["HX-Retarget"] == "#migration-progress-card" and changed["HX-Reswap"] == "outerHTML"
    page = changed.content.decode()
    assert "is paused" in page and "Resume…" in page and "Pause…" not in page
    assert 'hx-trigger="load delay:1s"' not in page  # nothing to follow while paused
    assert '<div id="pair" hx-swap-oob="true">' in page  # the dialog re-read from the database
    on_record = client.get(f"/migrate/records/{record.id}/progress/?part=live&seen=APPLYING&on=record", **HTMX)
    assert "hx-swap-oob" not in on_record.content.decode()  # the record page has no dialog


def test_controls_need_their_confirmation_and_a_reason(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = applying(client)
    unconfirmed = client.post(f"/migrate/records/{record.id}/pause/", **HTMX)
    assert unconfirmed.status_code == 400 and unconfirmed["Content-Type"] == "application/problem+json"
    assert MigrationRecord.objects.get().status == "APPLYING"
    blank = client.post(f"/migrate/records/{record.id}/close/", {"confirmed": "1", "reason": "  "}, **HTMX)
    assert blank.status_code == 422 and blank.json()["violations"][0]["pointer"] == "/reason"
    assert MigrationRecord.objects.get().status == "APPLYING"
    wrong = client.post(f"/migrate/records/{record.id}/resume/", {"confirmed": "1"}, **HTMX)
    assert wrong.status_code == 409 and wrong.json()["code"] == "MIGRATION_ILLEGAL_STATE"

    paused = client.post(f"/migrate/records/{record.id}/pause/", {"confirmed": "1"}, **HTMX)
    assert paused.status_code == 200 and "is paused" in paused.content.decode()
    resumed = client.post(f"/migrate/records/{record.id}/resume/", {"confirmed": "1"}, **HTMX)
    assert "Applying migration" in resumed.content.decode()
    closed = client.post(f"/migrate/records/{record.id}/close/", {"confirmed": "1", "reason": "not now"}, **HTMX)
    page = closed.content.decode()
    assert "was closed as partially applied" in page and "0 of 3 runs applied, 3 not applied (closed)" in page
    record.refresh_from_db()
    assert (record.status, record.close_reason, record.closed_by) == ("CLOSED", "not now", "admin")
    record_page = client.get(f"/migrate/records/{record.id}/").content.decode()
    assert "not now" in record_page and "not applied (closed)" in record_page


def test_only_migrators_may_use_the_controls(parked: dict[str, list[str]], demo_users: dict[str, Any]) -> None:
    record = applying(admin_client(demo_users))
    approver = Client()
    approver.force_login(demo_users["alice"])
    for action in ("pause", "resume", "close"):
        refused = approver.post(f"/migrate/records/{record.id}/{action}/", {"confirmed": "1", "reason": "x"}, **HTMX)
        assert refused.status_code == 403, action
    assert MigrationRecord.objects.get().status == "APPLYING"


def test_preview_refuses_runs_frozen_in_another_open_migration(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = applying(client)
    refused = client.post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX)
    assert refused.status_code == 409 and refused["Content-Type"] == "application/problem+json"
    problem = refused.json()
    assert problem["title"] == "The selected runs are in another migration"
    assert f"frozen in migration #{record.id}" in problem["detail"] and "being applied" in problem["detail"]
    assert MigrationRecord.objects.count() == 1


def test_a_new_preview_in_the_dialog_replaces_its_previous_one(
    parked: dict[str, list[str]], demo_users: dict[str, Any], drain: Callable[[], int]
) -> None:
    client = admin_client(demo_users)
    page = client.post(f"{DIALOG}preview/", form(review=("end", "all"))).content.decode()
    first = MigrationRecord.objects.get()
    assert f'name="replaces" value="{first.id}" form="migrate-form"' in page
    again = client.post(f"{DIALOG}preview/", {**form(review=("cancel", "all")), "replaces": str(first.id)})
    assert again.status_code == 200
    first.refresh_from_db()
    assert first.status == "DISCARDED"
    assert MigrationRecord.objects.exclude(pk=first.id).get().rows[0]["action"] == "cancel"


def test_the_poll_that_finds_the_last_runs_applied_answers_the_finished_card(
    parked: dict[str, list[str]], demo_users: dict[str, Any], drain: Callable[[], int]
) -> None:
    """The story: the ends were left to the executor; when it had applied them, the poll read
    the record's status (still APPLYING) before the progress read that finishes the record, so
    it answered a bar at 100 % without a poll, and the card said *Applying* for ever."""
    client = admin_client(demo_users)
    record = applying(client)
    assert operations.migration_run_background(record_id=record.id, budget_seconds=10) == "waiting"
    drain()  # the executor applies the ends
    assert MigrationRecord.objects.get().status == "APPLYING"  # nobody has read the progress yet
    polled = client.get(f"/migrate/records/{record.id}/progress/?part=live&seen=APPLYING&on=dialog", **HTMX)
    assert polled["HX-Retarget"] == "#migration-progress-card"
    assert "is done" in polled.content.decode()
