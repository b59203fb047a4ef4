"""Each permission refusal of the API, and that the permission named is enough."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.api import documents
from tests.api.conftest import SENTINEL, assert_problem

pytestmark = pytest.mark.django_db

# fixed ids: test ids hold them, and every pytest-xdist worker must collect the same tests
RUN = str(uuid.UUID(int=0x77EE7431))
TASK = str(uuid.UUID(int=0x07249846))

# (method, path, body): every endpoint of the API
ENDPOINTS = [
    ("get", "/api/v1/runs/", None),
    ("post", "/api/v1/runs/", {"definition_id": "api-purchase", "payload": {"secret": SENTINEL}}),
    ("get", f"/api/v1/runs/{RUN}/", None),
    ("get", f"/api/v1/runs/{RUN}/history/", None),
    ("post", f"/api/v1/runs/{RUN}/signals/", {"name": "paid", "payload": {"secret": SENTINEL}}),
    ("post", f"/api/v1/runs/{RUN}/cancel/", {"reason": SENTINEL}),
    ("post", f"/api/v1/runs/{RUN}/retry/", None),
    ("post", f"/api/v1/runs/{RUN}/migrate/", {"target_version": 2}),
    ("get", "/api/v1/tasks/", None),
    ("get", f"/api/v1/tasks/{TASK}/", None),
    ("post", f"/api/v1/tasks/{TASK}/complete/", {"decision": "approve", "payload": {"secret": SENTINEL}}),
    ("post", f"/api/v1/tasks/{TASK}/reassign/", {"mode": "user", "value": "bob"}),
    ("get", "/api/v1/definitions/", None),
    ("post", "/api/v1/definitions/", {"text": documents.purchase(1)}),
    ("post", "/api/v1/definitions/default/api-purchase/1/publish/", None),
    ("post", "/api/v1/definitions/default/api-purchase/1/deprecate/", None),
    ("post", "/api/v1/definitions/default/api-purchase/1/retire/", None),
    ("post", "/api/v1/definitions/default/api-purchase/1/reinstate/", None),
    ("get", "/api/v1/activations/", None),
    ("put", "/api/v1/activations/default/api-purchase/", {"version": 1}),
    ("delete", "/api/v1/activations/default/api-purchase/", None),
]

# what a signed-in user without any permission is refused (tasks answer 404 instead, below)
NEEDS_PERMISSION = [e for e in ENDPOINTS if "/tasks/" not in e[1]]


def call(client: APIClient, method: str, path: str, body: Any) -> Any:
    return getattr(client, method)(path, body, format="json") if body is not None else getattr(client, method)(path)


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
def test_anonymous_callers_are_asked_to_authenticate(method: str, path: str, body: Any) -> None:
    response = call(APIClient(), method, path, body)
    assert_problem(response, 401, "NOT_AUTHENTICATED")
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize(("method", "path", "body"), NEEDS_PERMISSION, ids=[f"{m} {p}" for m, p, _ in NEEDS_PERMISSION])
def test_a_user_without_permissions_is_refused(
    method: str, path: str, body: Any, make_user: Callable[..., Any], client_for: Callable[..., APIClient]
) -> None:
    client = client_for(make_user("nobody"))
    body_ = assert_problem(call(client, method, path, body), 403, "PERMISSION_DENIED")
    assert "permission workflows." in body_["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "granted"),
    [
        ("post", "/api/v1/runs/", {"definition_id": "api-purchase"}, "workflows.change_run"),
        ("post", f"/api/v1/runs/{RUN}/signals/", {"name": "paid"}, "workflows.add_run"),
        ("post", f"/api/v1/runs/{RUN}/cancel/", {}, "workflows.add_run"),
        # cancel is one permission everywhere (issue #25): change_run signals and retries only
        ("post", f"/api/v1/runs/{RUN}/cancel/", {}, "workflows.change_run"),
        ("post", f"/api/v1/runs/{RUN}/retry/", None, "workflows.view_run"),
        ("post", f"/api/v1/runs/{RUN}/migrate/", {"target_version": 2}, "workflows.change_run"),
        ("get", "/api/v1/runs/", None, "workflows.change_definitionversion"),
        ("post", "/api/v1/definitions/", {"text": "x"}, "workflows.view_definitionversion"),
        ("post", "/api/v1/definitions/default/api-purchase/1/publish/", None, "workflows.change_run"),
        ("put", "/api/v1/activations/default/api-purchase/", {"version": 1}, "workflows.view_definitionversion"),
        ("delete", "/api/v1/activations/default/api-purchase/", None, "workflows.add_run"),
    ],
)
def test_another_permission_is_not_enough(
    method: str,
    path: str,
    body: Any,
    granted: str,
    make_user: Callable[..., Any],
    client_for: Callable[..., APIClient],
) -> None:
    client = client_for(make_user("partial", granted))
    assert_problem(call(client, method, path, body), 403, "PERMISSION_DENIED")


@pytest.mark.parametrize(
    ("method", "path", "body", "granted", "status"),
    [
        # past the permission check, the request reaches the operation (an unknown run: 404)
        ("post", "/api/v1/runs/", {"definition_id": "api-purchase"}, "workflows.add_run", 422),
        ("post", f"/api/v1/runs/{RUN}/signals/", {"name": "paid"}, "workflows.change_run", 404),
        ("post", f"/api/v1/runs/{RUN}/cancel/", {}, "workflows.cancel_runs", 404),
        ("post", f"/api/v1/runs/{RUN}/retry/", None, "workflows.change_run", 404),
        ("post", f"/api/v1/runs/{RUN}/migrate/", {"target_version": 2}, "workflows.migrate_runs", 404),
        ("get", "/api/v1/runs/", None, "workflows.view_run", 200),
        ("get", f"/api/v1/runs/{RUN}/", None, "workflows.view_run", 404),
        ("get", f"/api/v1/runs/{RUN}/history/", None, "workflows.view_run", 404),
        ("get", "/api/v1/definitions/", None, "workflows.view_definitionversion", 200),
        ("post", "/api/v1/definitions/", {"text": documents.purchase(1)}, "workflows.change_definitionversion", 201),
        (
            "post",
            "/api/v1/definitions/default/api-purchase/1/publish/",
            None,
            "workflows.change_definitionversion",
            404,
        ),
        ("get", "/api/v1/activations/", None, "workflows.view_definitionversion", 200),
        ("put", "/api/v1/activations/default/api-purchase/", {"version": 1}, "workflows.change_definitionversion", 409),
        ("delete", "/api/v1/activations/default/api-purchase/", None, "workflows.change_definitionversion", 204),
    ],
)
def test_the_named_permission_is_enough(
    method: str,
    path: str,
    body: Any,
    granted: str,
    status: int,
    make_user: Callable[..., Any],
    client_for: Callable[..., APIClient],
) -> None:
    client = client_for(make_user("granted", granted))
    assert call(client, method, path, body).status_code == status


def test_session_authentication_works_for_signed_in_browsers(make_user: Callable[..., Any]) -> None:
    make_user("viewer", "workflows.view_run")
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username="viewer", password="viewer")
    assert client.get("/api/v1/runs/").status_code == 200
    # a session write without the CSRF token is refused
    response = client.post("/api/v1/runs/", {"definition_id": "api-purchase"}, format="json")
    assert_problem(response, 403, "PERMISSION_DENIED")


@pytest.mark.django_db(transaction=True)
class TestTasksOnlyByTheirAssignees:
    @pytest.fixture
    def task(self, admin_api: APIClient, deployed: Callable[..., Any], drain: Callable[..., int]) -> dict[str, Any]:
        deployed()
        run = admin_api.post(
            "/api/v1/runs/", {"definition_id": "api-purchase", "payload": {"number": "PO-7", "total": 5}}, format="json"
        ).json()["run"]
        drain()
        admin_api.post(f"/api/v1/runs/{run}/signals/", {"name": "paid", "payload": {"amount": 5}}, format="json")
        drain()
        assert admin_api.get("/api/v1/tasks/").json()["results"] == []  # a superuser is no approver
        from workflows import queries

        found = queries.tasks_for(_approver()).get()
        return {"id": str(found.id), "run": run}

    def test_the_list_holds_only_the_callers_tasks(
        self, task: dict[str, Any], make_user: Callable[..., Any], client_for: Callable[..., APIClient]
    ) -> None:
        outsider = client_for(make_user("mallory", "workflows.change_run", "workflows.view_run"))
        assert outsider.get("/api/v1/tasks/").json()["results"] == []
        approver = client_for(_approver())
        assert [t["id"] for t in approver.get("/api/v1/tasks/").json()["results"]] == [task["id"]]

    @pytest.mark.parametrize(
        ("method", "suffix", "body"),
        [
            ("get", "", None),
            ("post", "complete/", {"decision": "approve", "payload": {"c": SENTINEL}}),
            ("post", "reassign/", {"mode": "user", "value": "mallory"}),
        ],
    )
    def test_someone_who_cannot_act_on_a_task_is_told_it_does_not_exist(
        self,
        task: dict[str, Any],
        method: str,
        suffix: str,
        body: Any,
        make_user: Callable[..., Any],
        client_for: Callable[..., APIClient],
    ) -> None:
        outsider = client_for(make_user("mallory", "workflows.change_run", "workflows.view_run"))
        response = call(outsider, method, f"/api/v1/tasks/{task['id']}/{suffix}", body)
        assert_problem(response, 404, "TASK_NOT_FOUND")

    def test_an_assignee_completes_and_is_then_refused_a_second_time(
        self, task: dict[str, Any], client_for: Callable[..., APIClient]
    ) -> None:
        approver = client_for(_approver())
        url = f"/api/v1/tasks/{task['id']}/complete/"
        assert approver.post(url, {"decision": "approve"}, format="json").status_code == 202
        again = approver.post(url, {"decision": "approve", "payload": {"comment": SENTINEL}}, format="json")
        assert_problem(again, 409, "TASK_NOT_WAITING")

    def test_a_decision_payload_that_fails_its_schema_lists_pointers(
        self, task: dict[str, Any], client_for: Callable[..., APIClient]
    ) -> None:
        approver = client_for(_approver())
        response = approver.post(
            f"/api/v1/tasks/{task['id']}/complete/",
            {"decision": "approve", "payload": {"comment": SENTINEL * 5}},
            format="json",
        )
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert [v["pointer"] for v in body["violations"]] == ["/comment"]

    def test_a_decision_the_task_does_not_offer_is_refused(
        self, task: dict[str, Any], client_for: Callable[..., APIClient]
    ) -> None:
        approver = client_for(_approver())
        response = approver.post(f"/api/v1/tasks/{task['id']}/complete/", {"decision": "escalate"}, format="json")
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert body["violations"][0]["pointer"] == "/decision"

    def test_a_stale_expected_assignment_is_task_not_waiting(
        self, task: dict[str, Any], client_for: Callable[..., APIClient]
    ) -> None:
        approver = client_for(_approver())
        response = approver.post(
            f"/api/v1/tasks/{task['id']}/complete/",
            {"decision": "approve", "expected_assignment": {"mode": "user", "value": "carol"}},
            format="json",
        )
        assert_problem(response, 409, "TASK_NOT_WAITING")

    def test_reassigning_away_takes_the_task_out_of_the_approvers_hands(
        self, task: dict[str, Any], client_for: Callable[..., APIClient], make_user: Callable[..., Any]
    ) -> None:
        approver = client_for(_approver())
        make_user("bob")
        moved = approver.post(
            f"/api/v1/tasks/{task['id']}/reassign/", {"assignment": {"mode": "user", "value": "bob"}}, format="json"
        )
        assert moved.status_code == 200, moved.content
        assert moved.json()["assignment"] == {"mode": "user", "value": "bob"}
        assert approver.get("/api/v1/tasks/").json()["results"] == []
        assert_problem(
            approver.post(f"/api/v1/tasks/{task['id']}/complete/", {"decision": "approve"}, format="json"),
            404,
            "TASK_NOT_FOUND",
        )

    @pytest.mark.parametrize(
        ("mode", "value"),
        [("user", "ghost-user"), ("user", "gone-user"), ("group", "ghost-group"), ("role", "ghost-group")],
        ids=["unknown user", "inactive user", "unknown group", "unknown role"],
    )
    def test_a_task_is_reassigned_only_to_an_active_user_or_a_group_that_exists(
        self,
        task: dict[str, Any],
        mode: str,
        value: str,
        client_for: Callable[..., APIClient],
        make_user: Callable[..., Any],
    ) -> None:
        # the story (issue #25): an approver hid a group task from the whole group by
        # reassigning it to a user that does not exist
        from workflows.models import HistoryEntry, Task

        gone = make_user("gone-user")
        gone.is_active = False
        gone.save()
        approver = client_for(_approver())
        response = approver.post(f"/api/v1/tasks/{task['id']}/reassign/", {"mode": mode, "value": value}, format="json")
        body = assert_problem(response, 422, "ASSIGNEE_NOT_FOUND")
        assert value not in response.content.decode()
        assert [v["pointer"] for v in body["violations"]] == ["/value"]
        row = Task.objects.get(pk=task["id"])
        assert (row.assignment_mode, row.assignment_value) == ("group", "approvers")
        assert not HistoryEntry.objects.filter(run_id=task["run"], type="TASK_REASSIGNED").exists()
        assert [t["id"] for t in approver.get("/api/v1/tasks/").json()["results"]] == [task["id"]]


def _approver() -> Any:
    from django.contrib.auth.models import Group, User

    user, created = User.objects.get_or_create(username="alice")
    if created:
        user.groups.add(Group.objects.get_or_create(name="approvers")[0])
    return user
