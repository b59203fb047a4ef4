"""The Task admin: filters and the reassign action (through ``operations.reassign_task``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.engine import documents
from workflows import definitions, operations
from workflows.engine import db, executor
from workflows.models import HistoryEntry, Task

pytestmark = pytest.mark.django_db(transaction=True)


def deploy(text: str) -> None:
    """Load, publish and activate a document (as tests/engine's ``deploy`` fixture does)."""
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def drain(run_id: Any = None) -> None:
    """Run the executor in-process until nothing is runnable."""
    executor.drain(run_id=run_id, budget_seconds=10)


CHANGELIST = "/admin/workflows/task/"


def _open_tasks(count: int = 2) -> list[Task]:
    deploy(documents.APPROVAL)
    runs = [
        operations.start(
            definition_id="approval", business_key=f"PO-{n}", payload={"number": f"PO-{n}", "total": 5000}
        ).run_id
        for n in range(count)
    ]
    drain()
    return [Task.objects.get(run_id=r) for r in runs]


def _admin(users: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(users["admin"])
    return client


def test_filters_find_open_overdue_and_by_assignee(demo_users: dict[str, Any]) -> None:
    first, second = _open_tasks()
    db.execute("UPDATE workflow_tasks SET due_at = now() - interval '1 hour' WHERE id = %s", [first.id])
    operations.reassign_task(task_id=second.id, mode="user", value="bob", actor=demo_users["admin"])
    admin = _admin(demo_users)

    def titles(query: str) -> set[str]:
        page = admin.get(f"{CHANGELIST}?{query}")
        assert page.status_code == 200
        return {t.title for t in page.context["cl"].result_list}

    assert titles("open=yes") == {"Approve purchase PO-0", "Approve purchase PO-1"}
    assert titles("overdue=yes") == {"Approve purchase PO-0"}
    assert titles("assignee=user:bob") == {"Approve purchase PO-1"}
    assert titles("assignee=group:approvers") == {"Approve purchase PO-0"}


def test_reassign_asks_for_the_assignee_then_reassigns_through_the_operation(demo_users: dict[str, Any]) -> None:
    tasks = _open_tasks()
    admin = _admin(demo_users)
    selected = {"action": "reassign", "_selected_action": [str(t.id) for t in tasks]}

    form = admin.post(CHANGELIST, selected)
    assert form.status_code == 200 and "Username or group name" in form.content.decode()
    assert Task.objects.filter(assignment_value="approvers").count() == 2

    refused = admin.post(CHANGELIST, {**selected, "apply": "1", "mode": "user", "value": "nobody"})
    assert "No active user has this username." in refused.content.decode()

    done = admin.post(CHANGELIST, {**selected, "apply": "1", "mode": "user", "value": "bob"}, follow=True)
    assert "Reassigned 2 task(s) to user bob." in done.content.decode()
    assert set(Task.objects.values_list("assignment_mode", "assignment_value")) == {("user", "bob")}
    entry = HistoryEntry.objects.filter(type="TASK_REASSIGNED").first()
    assert entry is not None and entry.actor_id == "admin"


def test_a_task_that_is_not_open_is_reported_and_left_alone(demo_users: dict[str, Any]) -> None:
    (task,) = _open_tasks(count=1)
    operations.complete_task(task_id=task.id, decision="reject", actor=demo_users["alice"])
    admin = _admin(demo_users)

    answer = admin.post(
        CHANGELIST,
        {"action": "reassign", "_selected_action": [str(task.id)], "apply": "1", "mode": "group", "value": "approvers"},
        follow=True,
    )
    assert "TASK_NOT_WAITING" in answer.content.decode()


def test_a_task_is_shown_read_only(demo_users: dict[str, Any]) -> None:
    (task,) = _open_tasks(count=1)
    page = _admin(demo_users).get(f"{CHANGELIST}{task.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"/tasks/{task.id}/" in html and 'name="_save"' not in html
