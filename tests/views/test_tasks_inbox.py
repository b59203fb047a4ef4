"""The inbox at volume and claims on group tasks, through Django's test client.

Paging in a stable order (due date, then id), search and filters in the query string (a bad
filter is a form error), "Completed by me", and the claim: one member at a time, seen by the
others, whose decision is refused while someone else holds it. The races are run as two real
transactions (threads with their own connections): whichever commits first wins, the other
is refused and records nothing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from tests.engine import documents
from tests.reliability.concurrency import in_threads
from tests.support.waiting import eventually
from tests.views.test_tasks_pages import FORM, _form_fields, deploy, drain
from workflows import operations
from workflows.exceptions import TaskNotWaiting
from workflows.models import Command, Task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_confirmation_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workflows.views.tasks.CONFIRM_WAIT_SECONDS", 0)


def _open_many(count: int) -> list[Task]:
    """``count`` group tasks (approvers) of the approval workflow, business keys PO-1..."""
    deploy(documents.APPROVAL)
    runs = [
        operations.start(
            definition_id="approval", business_key=f"PO-{i}", payload={"number": f"PO-{i}", "total": 5000}
        ).run_id
        for i in range(1, count + 1)
    ]
    drain()
    return [Task.objects.get(run_id=r) for r in runs]


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _listed(html: str) -> list[str]:
    """The task ids an inbox page lists, in order."""
    return re.findall(r'<a href="/tasks/([0-9a-f-]{36})/">', html)


def _workflow_choices(html: str) -> list[str]:
    """The options of the inbox's workflow filter, "Any" left out."""
    select = re.search(r'<select name="workflow"[^>]*>(.*?)</select>', html, re.S)
    assert select, "the inbox has a workflow filter"
    return [v for v in re.findall(r'<option value="([^"]*)"', select.group(1)) if v]


# --- paging, search, filters, order ----------------------------------------------------------


def test_the_inbox_pages_in_due_order_then_id(demo_users: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workflows.views.tasks.PAGE_SIZE", 2)
    tasks = _open_many(5)
    base = datetime(2030, 1, 10, tzinfo=UTC)
    dues = [base + timedelta(days=2), None, base, base, None]  # ties on the due date and on no date
    for task, due in zip(tasks, dues, strict=True):
        Task.objects.filter(pk=task.pk).update(due_at=due)
    expected = [
        str(t.id)
        for t in sorted(tasks, key=lambda t: (dues[tasks.index(t)] is None, dues[tasks.index(t)] or base, t.id))
    ]
    alice = _client(demo_users["alice"])

    seen = []
    for number in (1, 2, 3):
        html = alice.get(f"/tasks/?page={number}").content.decode()
        assert f"Page {number} of 3" in html and "5 open tasks" in html
        seen += _listed(html)
    assert seen == expected

    reversed_order = []
    for number in (1, 2, 3):
        html = alice.get(f"/tasks/?sort=-due&page={number}").content.decode()
        reversed_order += _listed(html)
        if number < 3:  # the next page keeps the order
            assert f'href="?sort=-due&amp;page={number + 1}"' in html
    # latest due first; still no due date last, ties by id (now descending)
    assert reversed_order == list(reversed(expected[:3])) + list(reversed(expected[3:]))
    # a page out of range shows the last page; an unreadable one the first
    assert _listed(alice.get("/tasks/?page=99").content.decode()) == expected[4:]
    assert _listed(alice.get("/tasks/?page=x").content.decode()) == expected[:2]


def test_search_and_filters_narrow_the_inbox(demo_users: dict[str, Any]) -> None:
    tasks = _open_many(3)
    deploy(FORM)  # a second workflow, assigned to alice herself
    own = operations.start(definition_id="form-check", business_key="INV-9", payload={"number": "INV-9"}).run_id
    drain(own)
    Task.objects.filter(pk=tasks[0].pk).update(due_at=datetime(2030, 1, 1, tzinfo=UTC))
    alice = _client(demo_users["alice"])

    def listed(query: str) -> set[str]:
        page = alice.get(f"/tasks/?{query}")
        assert page.status_code == 200
        return set(_listed(page.content.decode()))

    assert len(listed("")) == 4
    assert listed("q=po-2") == {str(tasks[1].id)}  # the business key, any case
    assert listed("q=Check") == {str(Task.objects.get(run_id=own).id)}  # the title
    assert listed("workflow=approval") == {str(t.id) for t in tasks}
    assert listed("group=approvers") == {str(t.id) for t in tasks}
    assert listed("due_before=2030-01-02") == {str(tasks[0].id)}
    assert listed("due_before=2029-12-31") == set()

    empty = alice.get("/tasks/?q=nothing-like-this").content.decode()
    assert "No open task matches these filters." in empty and "Nothing is waiting for you" not in empty
    assert 'value="nothing-like-this"' in empty  # the form keeps what was asked

    bad = alice.get("/tasks/?due_before=31.12.2029&workflow=unknown")
    assert bad.status_code == 200
    html = bad.content.decode()
    assert "Enter a date as YYYY-MM-DD." in html and "Select a valid choice." in html
    assert "Correct the filters to see your tasks." in html and _listed(html) == []

    # the refresh of a filtered inbox keeps its filters
    fragment = alice.get("/tasks/?q=PO-2", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section id="inbox"') and 'hx-get="/tasks/?q=PO-2"' in fragment


def test_completed_by_me_lists_the_users_decisions_newest_first(demo_users: dict[str, Any]) -> None:
    tasks = _open_many(2)
    alice = _client(demo_users["alice"])
    for task in tasks:
        page = alice.get(f"/tasks/{task.id}/").content.decode()
        assert alice.post(f"/tasks/{task.id}/", _form_fields(page, "reject")).status_code == 302
        drain(task.run_id)

    html = alice.get("/tasks/completed/").content.decode()
    assert "2 tasks decided by you." in html and "Reject" in html
    assert _listed(html) == [str(tasks[1].id), str(tasks[0].id)]
    assert "You have not decided any task yet." in _client(demo_users["bob"]).get("/tasks/completed/").content.decode()
    assert Client().get("/tasks/completed/").status_code == 302


# --- claims ------------------------------------------------------------------------------------


def test_a_claimed_task_is_held_by_one_member_and_the_others_see_who(demo_users: dict[str, Any]) -> None:
    (task,) = _open_many(1)
    alice, bob = _client(demo_users["alice"]), _client(demo_users["bob"])
    bobs_form = _form_fields(bob.get(f"/tasks/{task.id}/").content.decode(), "approve")

    claimed = alice.post(f"/tasks/{task.id}/claim/", follow=True).content.decode()
    assert "You claimed this task" in claimed and "You hold this task" in claimed
    assert Task.objects.get(pk=task.pk).claimed_by == "alice"
    assert "Claimed by you" in alice.get("/tasks/").content.decode()
    assert "Claimed by alice" in bob.get("/tasks/").content.decode()

    seen = bob.get(f"/tasks/{task.id}/").content.decode()
    assert "alice</strong> has claimed this task" in seen and 'name="decision"' not in seen

    refused = bob.post(f"/tasks/{task.id}/claim/", follow=True).content.decode()
    assert "alice has claimed this task; only they can decide it until they release it." in refused
    assert Task.objects.get(pk=task.pk).claimed_by == "alice"

    # bob's decision from a form drawn before the claim: refused, nothing changes
    decided = bob.post(f"/tasks/{task.id}/", bobs_form)
    assert decided.status_code == 409
    assert "alice has claimed this task" in decided.content.decode()
    assert not Command.objects.filter(kind="COMPLETION").exists()
    assert Task.objects.get(pk=task.pk).status == "OPEN"

    # the claimer decides as without a claim
    page = alice.get(f"/tasks/{task.id}/").content.decode()
    assert alice.post(f"/tasks/{task.id}/", _form_fields(page, "approve")).status_code == 302
    drain(task.run_id)
    done = Task.objects.get(pk=task.pk)
    assert done.status == "COMPLETED" and done.completed_by == "alice"


def test_the_claimer_releases_and_another_member_may_claim(demo_users: dict[str, Any]) -> None:
    (task,) = _open_many(1)
    alice, bob = _client(demo_users["alice"]), _client(demo_users["bob"])
    alice.post(f"/tasks/{task.id}/claim/")

    # only the holder releases
    assert "alice has claimed" in bob.post(f"/tasks/{task.id}/claim/", {"release": "1"}, follow=True).content.decode()
    released = alice.post(f"/tasks/{task.id}/claim/", {"release": "1"}, follow=True).content.decode()
    assert "You released this task" in released
    assert Task.objects.get(pk=task.pk).claimed_by == ""

    bob.post(f"/tasks/{task.id}/claim/")
    assert Task.objects.get(pk=task.pk).claimed_by == "bob"
    assert bob.post(f"/tasks/{task.id}/claim/").status_code == 302  # claiming again changes nothing
    assert Task.objects.get(pk=task.pk).claimed_by == "bob"


def test_a_user_task_needs_no_claim_and_outsiders_get_404(demo_users: dict[str, Any]) -> None:
    deploy(FORM)
    run_id = operations.start(definition_id="form-check", payload={"number": "1"}).run_id
    drain(run_id)
    task = Task.objects.get(run_id=run_id)
    alice = _client(demo_users["alice"])

    assert 'action="/tasks/' + str(task.id) + '/claim/"' not in alice.get(f"/tasks/{task.id}/").content.decode()
    refused = alice.post(f"/tasks/{task.id}/claim/", follow=True).content.decode()
    assert "needs no claim" in refused and Task.objects.get(pk=task.pk).claimed_by == ""
    assert _client(demo_users["requester"]).post(f"/tasks/{task.id}/claim/").status_code == 404
    assert _client(demo_users["alice"]).get(f"/tasks/{task.id}/claim/").status_code == 405


def test_a_reassignment_releases_the_claim(demo_users: dict[str, Any]) -> None:
    (task,) = _open_many(1)
    operations.claim_task(task_id=task.id, actor=demo_users["alice"])
    operations.reassign_task(task_id=task.id, mode="user", value="bob", actor=demo_users["admin"])
    task.refresh_from_db()
    assert task.assignment_value == "bob" and task.claimed_by == "" and task.claimed_at is None


# --- races: two transactions -----------------------------------------------------------------


def _while_held(hold: Callable[[], Any], other: Callable[[], Any]) -> Any:
    """Run ``hold`` in a transaction that stays open until ``other`` (another thread, its own
    connection) waits on a row lock; then commit and answer what ``other`` returned or raised."""
    held = threading.Event()
    result: list[Any] = []

    def second() -> None:
        held.wait(30)
        try:
            result.append(other())
        except Exception as exc:
            result.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=second, daemon=True)
    with transaction.atomic():
        hold()
        thread.start()
        held.set()
        eventually(_someone_waits_on_a_lock, timeout=20, what="the second transaction to wait on the row lock")
    thread.join(30)
    assert not thread.is_alive()
    return result[0]


def _someone_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool(cursor.fetchone()[0])


def test_two_members_claiming_together_one_wins(demo_users: dict[str, Any]) -> None:
    tasks = _open_many(3)
    for task in tasks:
        results = in_threads(
            [
                lambda t=task: operations.claim_task(task_id=t.id, actor=demo_users["alice"]),
                lambda t=task: operations.claim_task(task_id=t.id, actor=demo_users["bob"]),
            ]
        )
        refused = [r for r in results if isinstance(r, TaskNotWaiting)]
        assert len(refused) == 1 and refused[0].code == "TASK_CLAIMED", results
        winner = "alice" if results[0] is None else "bob"
        assert Task.objects.get(pk=task.pk).claimed_by == winner


def test_a_claim_waiting_on_another_claim_is_refused(demo_users: dict[str, Any]) -> None:
    (task,) = _open_many(1)
    outcome = _while_held(
        lambda: operations.claim_task(task_id=task.id, actor=demo_users["alice"]),
        lambda: operations.claim_task(task_id=task.id, actor=demo_users["bob"]),
    )
    assert isinstance(outcome, TaskNotWaiting) and outcome.code == "TASK_CLAIMED"
    assert Task.objects.get(pk=task.pk).claimed_by == "alice"


def test_a_decision_racing_a_claim_is_rolled_back(demo_users: dict[str, Any]) -> None:
    (task,) = _open_many(1)
    outcome = _while_held(
        lambda: operations.claim_task(task_id=task.id, actor=demo_users["alice"]),
        lambda: operations.complete_claimed_task(task_id=task.id, decision="reject", actor=demo_users["bob"]),
    )
    assert isinstance(outcome, TaskNotWaiting) and outcome.code == "TASK_CLAIMED"
    task.refresh_from_db()
    assert task.status == "OPEN" and task.claimed_by == "alice"
    assert not Command.objects.filter(kind="COMPLETION").exists()


def test_a_claim_racing_a_decision_finds_the_task_decided(demo_users: dict[str, Any]) -> None:
    (task,) = _open_many(1)
    outcome = _while_held(
        lambda: operations.complete_claimed_task(task_id=task.id, decision="reject", actor=demo_users["bob"]),
        lambda: operations.claim_task(task_id=task.id, actor=demo_users["alice"]),
    )
    assert isinstance(outcome, TaskNotWaiting) and outcome.code == "TASK_NOT_WAITING"
    task.refresh_from_db()
    assert task.status == "COMPLETING" and task.claimed_by == ""
    assert Command.objects.filter(kind="COMPLETION", run_id=task.run_id).count() == 1


def test_the_workflow_filter_offers_the_workflows_of_open_tasks_only(demo_users: dict[str, Any]) -> None:
    tasks = _open_many(2)
    deploy(FORM)
    own = operations.start(definition_id="form-check", business_key="INV-9", payload={"number": "INV-9"}).run_id
    drain(own)
    alice, bob = _client(demo_users["alice"]), _client(demo_users["bob"])
    assert _workflow_choices(alice.get("/tasks/").content.decode()) == ["approval", "form-check"]

    # a cancelled run's task is closed: its workflow leaves the filter with it
    operations.cancel(run_id=own, reason="not needed")
    drain(own)
    assert _workflow_choices(alice.get("/tasks/").content.decode()) == ["approval"]
    # the group's tasks stay offered while one of them is open
    operations.cancel(run_id=tasks[0].run_id, reason="not needed")
    drain(tasks[0].run_id)
    assert _workflow_choices(alice.get("/tasks/").content.decode()) == ["approval"]
    assert _workflow_choices(bob.get("/tasks/").content.decode()) == ["approval"]  # also in approvers
