"""The run and command admins: links to the viewer, the attention filters, retry and reconcile."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.engine.test_reconcile import CHARGED
from workflows import definitions, operations
from workflows.definitions import catalogs
from workflows.engine import db, executor
from workflows.models import Command, HistoryEntry, Run

pytestmark = pytest.mark.django_db(transaction=True)

BROKEN = """
definitionId: broken
definitionVersion: 1
contract: {name: broken.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: route
steps:
  - {id: route, type: decision, routes: [{when: "state.total > 10", to: done}], default: done}
  - {id: done, type: complete}
"""


def deploy(text: str) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def drain() -> None:
    executor.drain(budget_seconds=10)


@pytest.fixture
def admin(demo_users: Any) -> Client:
    client = Client()
    client.force_login(demo_users["admin"])
    return client


@pytest.fixture
def failed_run() -> Run:
    """A run whose start failed deterministically (its decision reads a missing field)."""
    deploy(BROKEN)
    run_id = operations.start(definition_id="broken", payload={}).run_id
    drain()
    run = Run.objects.get(pk=run_id)
    assert run.status == "FAILED"
    return run


@pytest.fixture
def unknown() -> Any:
    def charge(input: Any) -> Any:
        raise RuntimeError("declined")

    catalogs.callbacks.add("test.charge", charge, category="script")
    catalogs.callbacks.add("test.receipt", lambda input: None, category="script")
    deploy(CHARGED)
    run_id = operations.start(definition_id="charged", payload={}).run_id
    drain()
    command = Command.objects.get(run_id=run_id, kind="START")
    assert command.status == "OUTCOME_UNKNOWN"
    yield command
    catalogs.callbacks.unregister("test.charge", "script")
    catalogs.callbacks.unregister("test.receipt", "script")


def listed_ids(response: Any) -> set[str]:
    return set(re.findall(r'name="_selected_action" value="([^"]+)"', response.content.decode()))


def test_runs_link_to_their_viewer(admin: Client, failed_run: Run) -> None:
    changelist = admin.get("/admin/workflows/run/")
    assert changelist.status_code == 200
    assert f"/runs/{failed_run.id}/" in changelist.content.decode()
    change = admin.get(f"/admin/workflows/run/{failed_run.id}/change/")
    assert change.status_code == 200 and f"/runs/{failed_run.id}/" in change.content.decode()
    found = admin.get(f"/admin/workflows/run/?q={failed_run.id}")
    assert listed_ids(found) == {str(failed_run.id)}


def test_the_viewer_links_back_to_the_admin(admin: Client, failed_run: Run) -> None:
    page = admin.get(f"/runs/{failed_run.id}/")
    assert f"/admin/workflows/run/{failed_run.id}/change/" in page.content.decode()


def test_retry_action_recovers_a_failed_run(admin: Client, failed_run: Run) -> None:
    answer = admin.post(
        "/admin/workflows/run/", {"action": "retry", "_selected_action": [str(failed_run.id)]}, follow=True
    )
    assert "Recorded a retry for 1 run(s)." in answer.content.decode()
    retry = Command.objects.get(run_id=failed_run.id, kind="RETRY")
    assert (retry.status, retry.actor_kind, retry.actor_id) == ("PENDING", "USER", "admin")


def test_retry_refusals_are_reported_with_their_code(admin: Client, unknown: Command, failed_run: Run) -> None:
    # a pending run has nothing to retry
    answer = admin.post(
        "/admin/workflows/run/", {"action": "retry", "_selected_action": [str(unknown.run_id)]}, follow=True
    )
    assert "SIGNAL_REJECTED" in answer.content.decode()
    assert not Command.objects.filter(run_id=unknown.run_id, kind="RETRY").exists()


def test_command_filters_find_what_needs_attention(admin: Client, unknown: Command, failed_run: Run) -> None:
    failed_start = Command.objects.get(run_id=failed_run.id, kind="START")
    assert listed_ids(admin.get("/admin/workflows/command/?attention=outcome_unknown")) == {str(unknown.id)}
    assert listed_ids(admin.get("/admin/workflows/command/?attention=dead")) == set()
    db.execute("UPDATE workflow_commands SET status = 'DEAD' WHERE id = %s", [failed_start.id])
    assert listed_ids(admin.get("/admin/workflows/command/?attention=dead")) == {str(failed_start.id)}
    db.execute("UPDATE workflow_commands SET status = 'DEFERRED' WHERE id = %s", [failed_start.id])
    assert listed_ids(admin.get("/admin/workflows/command/?attention=deferred")) == {str(failed_start.id)}
    # stuck: unsettled for longer than STUCK_AFTER_SECONDS on the database clock
    assert listed_ids(admin.get("/admin/workflows/command/?attention=stuck")) == set()
    db.execute("UPDATE workflow_commands SET recorded_at = now() - interval '1 hour' WHERE id = %s", [failed_start.id])
    assert listed_ids(admin.get("/admin/workflows/command/?attention=stuck")) == {str(failed_start.id)}


def test_reconcile_action_asks_for_a_decision_and_a_reason(admin: Client, unknown: Command) -> None:
    form = admin.post("/admin/workflows/command/", {"action": "reconcile", "_selected_action": [str(unknown.id)]})
    assert form.status_code == 200
    body = form.content.decode()
    assert "Resolve" in body and "Replay" in body and "charge" in body  # the step of its effect marker

    blank = admin.post(
        "/admin/workflows/command/",
        {"action": "reconcile", "apply": "1", "_selected_action": [str(unknown.id)], "reason": "  "},
    )
    assert "This field is required." in blank.content.decode()
    assert Command.objects.get(pk=unknown.id).status == "OUTCOME_UNKNOWN"

    done = admin.post(
        "/admin/workflows/command/",
        {"action": "reconcile", "apply": "1", "_selected_action": [str(unknown.id)], "reason": "bank shows no charge"},
        follow=True,
    )
    assert "Reconciled" not in done.content.decode()  # no decision chosen yet: the form asks again
    done = admin.post(
        "/admin/workflows/command/",
        {
            "action": "reconcile",
            "apply": "1",
            "_selected_action": [str(unknown.id)],
            "decision": "replay",
            "reason": "bank shows no charge",
        },
        follow=True,
    )
    assert "Reconciled 1 command(s) (replay)." in done.content.decode()
    command = Command.objects.get(pk=unknown.id)
    assert (command.status, command.reconcile_action, command.reconciled_by) == ("PENDING", "replay", "admin")
    assert HistoryEntry.objects.filter(run_id=unknown.run_id, type="COMMAND_RECONCILED").count() == 1


def test_staff_without_change_permission_cannot_reconcile(unknown: Command) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    viewer = get_user_model().objects.create_user("viewer", password="viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_command"))
    client = Client()
    client.force_login(viewer)
    page = client.get("/admin/workflows/command/")
    assert page.status_code == 200 and 'value="reconcile"' not in page.content.decode()
    client.post(
        "/admin/workflows/command/",
        {
            "action": "reconcile",
            "apply": "1",
            "_selected_action": [str(unknown.id)],
            "decision": "replay",
            "reason": "r",
        },
    )
    assert Command.objects.get(pk=unknown.id).status == "OUTCOME_UNKNOWN"


def test_a_big_run_list_is_counted_by_estimate_and_filtered_by_stored_revisions(
    admin: Client, failed_run: Run, monkeypatch: Any
) -> None:
    """Past ``ESTIMATE_FROM`` rows the unfiltered list shows PostgreSQL's estimate (no count
    of the whole table); a filtered list is counted exactly; the definition and scope filters
    offer the stored revisions' values (no DISTINCT over every run)."""
    from workflows.admin import big

    for n in range(2):
        operations.start(definition_id="broken", payload={}, business_key=f"B-{n}")
    db.execute("ANALYZE workflow_runs")  # the estimate: 3 rows
    operations.start(definition_id="broken", payload={}, business_key="B-late")  # 4 rows now
    monkeypatch.setattr(big, "ESTIMATE_FROM", 1)

    page = admin.get("/admin/workflows/run/").content.decode()
    assert re.search(r"\b3 runs\b", page), "the unfiltered list shows the planner's estimate"
    filtered = admin.get("/admin/workflows/run/?definition_id=broken").content.decode()
    assert re.search(r"\b4 runs\b", filtered), "a filtered list is counted exactly"
    assert "?definition_id=broken" in page and "?scope=default" in page  # the filters' choices

    monkeypatch.setattr(big, "ESTIMATE_FROM", 10)  # a small table: counted exactly
    assert re.search(r"\b4 runs\b", admin.get("/admin/workflows/run/").content.decode())
