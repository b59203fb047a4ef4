"""The approvers' pages through Django's test client, with the executor drained in-process.

What an approver sees and what each submission records: the inbox, the task page, the
generated form, server-side errors next to fields, double submits, tasks that moved on, and
who may see a task at all.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from tests.engine import documents
from workflows import definitions, operations
from workflows.engine import executor
from workflows.models import Command, Run, Task

# the executor compares due times with now(): a test wrapped in one transaction would
# see the clock stand still
pytestmark = pytest.mark.django_db(transaction=True)


def deploy(text: str) -> None:
    """Load, publish and activate a document (as tests/engine's ``deploy`` fixture does)."""
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def drain(run_id: Any = None) -> None:
    """Run the executor in-process until nothing is runnable."""
    executor.drain(run_id=run_id, budget_seconds=10)


@pytest.fixture(autouse=True)
def _no_confirmation_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # no worker runs here: the page would wait for an executor that never comes
    monkeypatch.setattr("workflows.views.tasks.CONFIRM_WAIT_SECONDS", 0)


FORM = """
definitionId: form-check
definitionVersion: 1
contract: {name: form-check.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Check {{ state.number }}"
    assignment: {mode: user, value: alice}
    decisions:
      - name: approve
        label: Approve
        payloadSchema:
          type: object
          required: [amount, level, on]
          properties:
            amount: {type: number, minimum: 1, title: Approved amount, description: In euros}
            count: {type: integer}
            level: {enum: [low, high, 3]}
            urgent: {type: boolean}
            on: {type: string, format: date}
            at: {type: string, format: date-time}
            tags: {type: array, items: {type: string, maxLength: 5}}
            note: {type: string, maxLength: 10}
        next: done
      - name: reject
        label: Reject
        next: done
  - id: done
    type: complete
"""


def _open(text: str = documents.APPROVAL, payload: Any = None) -> Task:
    deploy(text)
    definition = re.search(r"definitionId: (\S+)", text)
    assert definition is not None
    recorded = operations.start(
        definition_id=definition.group(1), business_key="PO-7", payload=payload or {"number": "PO-7", "total": 5000}
    )
    drain(recorded.run_id)
    return Task.objects.get(run_id=recorded.run_id)


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form_fields(html: str, decision: str) -> dict[str, str]:
    """The hidden fields of one decision's form."""
    form = html.split(f'name="decision" value="{decision}"', 1)[1].split("</form>", 1)[0]
    return {
        name: value for name, value in re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', form)
    } | {"decision": decision}


def test_the_inbox_lists_the_tasks_of_the_users_groups(demo_users: dict[str, Any]) -> None:
    task = _open()

    page = _client(demo_users["alice"]).get("/tasks/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Approve purchase PO-7" in html and f"/tasks/{task.id}/" in html and "PO-7" in html
    assert "Nothing is waiting for you" in _client(demo_users["requester"]).get("/tasks/").content.decode()


def test_the_inbox_refreshes_as_an_htmx_fragment(demo_users: dict[str, Any]) -> None:
    _open()

    fragment = _client(demo_users["bob"]).get("/tasks/", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section id="inbox"') and "<html" not in fragment
    assert "Approve purchase PO-7" in fragment


def test_the_root_redirects_to_the_inbox_and_the_inbox_needs_a_sign_in(db: None) -> None:
    assert Client().get("/").headers["Location"] == "/tasks/"
    assert Client().get("/tasks/").headers["Location"].startswith("/accounts/login/?next=/tasks/")
    polled = Client().get("/tasks/", headers={"HX-Request": "true"})
    assert polled.headers["HX-Redirect"] == "/accounts/login/?next=/tasks/"


def test_someone_outside_the_group_gets_404_for_the_page_and_the_form(demo_users: dict[str, Any]) -> None:
    task = _open()
    requester = _client(demo_users["requester"])

    assert requester.get(f"/tasks/{task.id}/").status_code == 404
    assert requester.post(f"/tasks/{task.id}/", {"decision": "reject"}).status_code == 404
    assert not Command.objects.filter(kind="COMPLETION").exists()


def test_staff_with_the_change_permission_may_open_any_task(demo_users: dict[str, Any]) -> None:
    task = _open()
    requester = demo_users["requester"]
    requester.user_permissions.add(Permission.objects.get(codename="change_task"))

    assert _client(requester).get(f"/tasks/{task.id}/").status_code == 200


def test_the_task_page_shows_the_run_its_state_and_one_form_per_decision(demo_users: dict[str, Any]) -> None:
    task = _open()

    html = _client(demo_users["alice"]).get(f"/tasks/{task.id}/").content.decode()
    assert "approval" in html and "PO-7" in html and "review" in html
    assert '<dt title="total">Total</dt>' in html and "5000" in html
    assert html.count(f'<form method="post" action="/tasks/{task.id}/"') == 2
    assert 'name="payload/comment"' in html and "Up to 50 characters." in html
    assert 'name="csrfmiddlewaretoken"' in html and 'name="idempotency_key"' in html


def test_a_valid_decision_is_recorded_and_confirmed(demo_users: dict[str, Any]) -> None:
    task = _open()
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "approve")

    answer = alice.post(f"/tasks/{task.id}/", {**fields, "payload/comment": "fine"}, follow=True)
    assert answer.status_code == 200
    command = Command.objects.get(kind="COMPLETION")
    assert command.target["decision"] == "approve" and command.target["payload"] == {"comment": "fine"}
    assert command.actor_kind == "USER" and command.actor_id == "alice"
    assert "Your decision “Approve” was recorded." in answer.content.decode()
    drain(task.run_id)
    assert Run.objects.get(pk=task.run_id).status == "COMPLETED"
    html = alice.get(f"/tasks/{task.id}/").content.decode()
    assert "This task has been completed." in html and "by alice" in html and f'action="/tasks/{task.id}/"' not in html


def test_an_invalid_payload_shows_errors_next_to_fields_and_records_nothing(demo_users: dict[str, Any]) -> None:
    task = _open()
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "approve")

    answer = alice.post(f"/tasks/{task.id}/", {**fields, "payload/comment": "x" * 51})
    assert answer.status_code == 422
    html = answer.content.decode()
    assert re.search(r'id="f-approve-payload-comment-errors"><li>Use at most 50 characters.</li>', html)
    assert (
        "x" * 51 in html.split('id="f-approve-payload-comment"', 1)[1].split("</textarea>")[0]
        or 'value="' + "x" * 51 in html
    )
    assert not Command.objects.filter(kind="COMPLETION").exists()
    assert Task.objects.get(pk=task.pk).status == "OPEN"


def test_a_double_submit_records_one_completion(demo_users: dict[str, Any]) -> None:
    task = _open()
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "reject")

    first = alice.post(f"/tasks/{task.id}/", fields)
    second = alice.post(f"/tasks/{task.id}/", fields)
    assert first.status_code == second.status_code == 302
    assert Command.objects.filter(kind="COMPLETION").count() == 1


def test_a_task_completed_meanwhile_says_so(demo_users: dict[str, Any]) -> None:
    task = _open()
    alice, bob = _client(demo_users["alice"]), _client(demo_users["bob"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "approve")
    bob.post(f"/tasks/{task.id}/", _form_fields(bob.get(f"/tasks/{task.id}/").content.decode(), "reject"))

    answer = alice.post(f"/tasks/{task.id}/", {**fields, "payload/comment": "ok"})
    assert answer.status_code == 409
    assert "A decision has been recorded for this task" in answer.content.decode()
    assert Command.objects.filter(kind="COMPLETION").count() == 1


def test_a_task_reassigned_meanwhile_says_so_to_the_former_assignee(demo_users: dict[str, Any]) -> None:
    task = _open()
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "reject")
    operations.reassign_task(task_id=task.id, mode="user", value="admin", actor=demo_users["admin"])

    answer = alice.post(f"/tasks/{task.id}/", fields)
    assert answer.status_code == 409
    assert "reassigned while you had it open" in answer.content.decode()
    assert not Command.objects.filter(kind="COMPLETION").exists()


def test_a_reassignment_within_reach_is_refused_by_the_expected_assignment(demo_users: dict[str, Any]) -> None:
    task = _open()
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "reject")
    operations.reassign_task(task_id=task.id, mode="user", value="alice", actor=demo_users["admin"])

    answer = alice.post(f"/tasks/{task.id}/", fields)
    assert answer.status_code == 409 and "This task changed since you opened it" in answer.content.decode()
    assert not Command.objects.filter(kind="COMPLETION").exists()


def test_csrf_is_enforced(demo_users: dict[str, Any]) -> None:
    task = _open()
    client = Client(enforce_csrf_checks=True)
    client.force_login(demo_users["alice"])

    assert client.post(f"/tasks/{task.id}/", {"decision": "reject"}).status_code == 403
    assert not Command.objects.filter(kind="COMPLETION").exists()


def test_the_generated_form_reads_every_supported_type(demo_users: dict[str, Any]) -> None:
    task = _open(FORM, {"number": "F-1"})
    alice = _client(demo_users["alice"])
    html = alice.get(f"/tasks/{task.id}/").content.decode()
    assert '<label for="f-approve-payload-amount">Approved amount' in html and "In euros" in html
    assert 'type="date"' in html and 'type="datetime-local"' in html and 'type="checkbox"' in html
    assert '<option value="&quot;high&quot;">high</option>' in html and '<option value="3">3</option>' in html
    fields = _form_fields(html, "approve")

    alice.post(
        f"/tasks/{task.id}/",
        {
            **fields,
            "payload/amount": "12.5",
            "payload/count": "3",
            "payload/level": "3",
            "payload/urgent": "on",
            "payload/on": "2030-01-31",
            "payload/at": "2030-01-31T09:30",
            "payload/tags": "a\n\nb\n",
            "payload/note": "",
        },
    )
    assert Command.objects.get(kind="COMPLETION").target["payload"] == {
        "amount": 12.5,
        "count": 3,
        "level": 3,
        "urgent": True,
        "on": "2030-01-31",
        "at": "2030-01-31T09:30:00Z",
        "tags": ["a", "b"],
    }


def test_json_nested_thousands_deep_is_a_form_error_not_a_server_error(demo_users: dict[str, Any]) -> None:
    """Issue #40: 5,000-deep JSON in a task form's JSON field answered 500."""
    detailed = FORM.replace(
        "note: {type: string, maxLength: 10}",
        "note: {type: string, maxLength: 10}\n            details: {type: object}",
    )
    task = _open(detailed, {"number": "F-2"})
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "approve")
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    answer = alice.post(
        f"/tasks/{task.id}/",
        {**fields, "payload/amount": "2", "payload/level": "3", "payload/on": "2030-01-31", "payload/details": deep},
    )
    assert answer.status_code == 422
    html = answer.content.decode()
    assert re.search(r'id="f-approve-payload-details-errors"><li>Enter JSON that is nested less deeply.</li>', html)
    assert not Command.objects.filter(kind="COMPLETION").exists()


def test_unreadable_inputs_and_schema_violations_are_reported_together(demo_users: dict[str, Any]) -> None:
    task = _open(FORM, {"number": "F-1"})
    alice = _client(demo_users["alice"])
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "approve")

    answer = alice.post(
        f"/tasks/{task.id}/",
        {
            **fields,
            "payload/amount": "lots",
            "payload/count": "1.5",
            "payload/on": "31/01/2030",
            "payload/tags": "fine\ntoo-long",
        },
    )
    assert answer.status_code == 422
    html = answer.content.decode()
    errors = dict(re.findall(r'id="f-approve-payload-(\w+)-errors"><li>([^<]+)</li>', html))
    assert errors == {
        "amount": "Enter a number.",
        "count": "Enter a whole number.",
        "on": "Enter a date (YYYY-MM-DD).",
        "level": "This field is required.",
        "tags": "Use at most 5 characters.",
    }
    assert not Command.objects.filter(kind="COMPLETION").exists()
