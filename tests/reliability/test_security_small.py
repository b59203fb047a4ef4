"""Issue #25, smaller defects: each test opens with the defect it pins down.

- An ``Idempotency-Key`` (or any other header, path segment or text) with NUL or control
  characters answered 503 PERSISTENCE with ``Retry-After: 1``: clients retried forever.
- Idempotency keys were shared across callers: another user who sent admin's key got
  admin's run back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from workflows import operations
from workflows.exceptions import WorkflowError
from workflows.models import Command, Dedup, Run

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

SIMPLE = """
definitionId: sec-small
definitionVersion: 1
contract: {name: sec-small.v1, signals: {go: {type: object}}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


def client_for(username: str, *, superuser: bool = True) -> APIClient:
    user = User.objects.create_user(username=username, password=username, is_superuser=superuser)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def admin(db: None) -> APIClient:
    return client_for("admin")


def rows() -> tuple[int, int, int]:
    return Run.objects.count(), Command.objects.count(), Dedup.objects.count()


# --- Idempotency-Key: bad characters ----------------------------------------------------------


@pytest.mark.parametrize("key", ["a\x00b", "line\nbreak", "tab\there", "bell\x07", "del\x7f", " ", "é" * 256])
def test_an_idempotency_key_with_control_characters_is_a_400_problem_and_records_nothing(
    admin: APIClient, deploy: Callable[..., Any], key: str
) -> None:
    deploy(SIMPLE)
    before = rows()
    response = admin.post(
        "/api/v1/runs/", {"definition_id": "sec-small", "payload": {}}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert "Retry-After" not in response
    body = response.json()
    assert body["code"] == "INVALID_PAYLOAD"
    assert not key.strip() or key not in response.content.decode()
    assert rows() == before


def test_signal_and_completion_refuse_a_nul_idempotency_key_with_400(
    admin: APIClient, deploy: Callable[..., Any]
) -> None:
    deploy(SIMPLE)
    run = admin.post("/api/v1/runs/", {"definition_id": "sec-small", "payload": {}}, format="json").json()["run"]
    before = rows()
    signal = admin.post(
        f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, format="json", HTTP_IDEMPOTENCY_KEY="k\x00"
    )
    complete = admin.post(
        "/api/v1/tasks/00000000-0000-0000-0000-000000000000/complete/",
        {"decision": "x"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k\x00",
    )
    assert (signal.status_code, complete.status_code) == (400, 400), (signal.content, complete.content)
    assert signal.json()["code"] == complete.json()["code"] == "INVALID_PAYLOAD"
    assert rows() == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/definitions/def%00ault/sec-small/1/publish/",
        "/api/v1/definitions/default/sec%00small/1/deprecate/",
    ],
)
def test_a_nul_in_a_path_segment_is_a_400_problem_not_a_503(admin: APIClient, path: str) -> None:
    response = admin.post(path, {}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "INVALID_PAYLOAD"
    assert "Retry-After" not in response


def test_a_nul_in_an_activation_path_is_a_400_problem_not_a_503(admin: APIClient) -> None:
    put = admin.put("/api/v1/activations/default/sec%00small/", {"version": 1}, format="json")
    delete = admin.delete("/api/v1/activations/de%00fault/sec-small/")
    assert (put.status_code, delete.status_code) == (400, 400), (put.content, delete.content)


@pytest.mark.parametrize(
    ("operation", "kwargs"),
    [
        ("start", {"definition_id": "sec-small", "payload": {}, "idempotency_key": "k\x00"}),
        ("start", {"definition_id": "sec-small", "payload": {}, "business_key": "b\x00"}),
        ("start", {"definition_id": "sec\x00small", "payload": {}}),
        ("signal", {"name": "go\x00", "payload": {}}),
        ("signal", {"name": "go", "payload": {}, "branch": "b\x00"}),
        ("signal", {"name": "go", "payload": {}, "idempotency_key": "line\nbreak"}),
    ],
)
def test_text_with_a_nul_through_the_python_api_is_refused_not_a_retryable_error(
    deploy: Callable[..., Any], operation: str, kwargs: dict[str, Any]
) -> None:
    deploy(SIMPLE)
    if operation == "signal":
        kwargs = {"run_id": operations.start(definition_id="sec-small", payload={}).run_id, **kwargs}
    before = rows()
    with pytest.raises(WorkflowError) as refused:
        getattr(operations, operation)(**kwargs)
    assert 400 <= refused.value.status < 500 and not refused.value.retryable
    assert "\x00" not in str(refused.value)
    assert rows() == before


# --- Idempotency-Key: scoped per caller --------------------------------------------------------


def test_another_caller_sending_the_same_key_starts_a_run_of_its_own(
    admin: APIClient, deploy: Callable[..., Any]
) -> None:
    deploy(SIMPLE)
    other = client_for("mallory")
    body = {"definition_id": "sec-small", "payload": {}}
    first = admin.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    theirs = other.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    again = admin.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    assert (first.status_code, theirs.status_code, again.status_code) == (202, 202, 202)
    assert theirs.json()["run"] != first.json()["run"]
    assert again.json() == first.json()  # the first caller's replay still answers its own run
    assert Run.objects.count() == 2


def test_another_caller_with_a_different_body_under_the_same_key_is_no_conflict(
    admin: APIClient, deploy: Callable[..., Any]
) -> None:
    deploy(SIMPLE)
    other = client_for("mallory")
    admin.post("/api/v1/runs/", {"definition_id": "sec-small", "payload": {"a": 1}}, format="json",
               HTTP_IDEMPOTENCY_KEY="k")  # fmt: skip
    theirs = other.post(
        "/api/v1/runs/", {"definition_id": "sec-small", "payload": {"b": 2}}, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert theirs.status_code == 202, theirs.content


def test_signal_keys_are_scoped_per_caller(admin: APIClient, deploy: Callable[..., Any]) -> None:
    deploy(SIMPLE)
    other = client_for("mallory")
    run = admin.post("/api/v1/runs/", {"definition_id": "sec-small", "payload": {}}, format="json").json()["run"]
    mine = admin.post(f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, format="json",
                      HTTP_IDEMPOTENCY_KEY="s-1")  # fmt: skip
    theirs = other.post(f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, format="json",
                        HTTP_IDEMPOTENCY_KEY="s-1")  # fmt: skip
    assert (mine.status_code, theirs.status_code) == (202, 202)
    assert theirs.json()["id"] != mine.json()["id"]
    assert Command.objects.filter(run_id=run, kind="SIGNAL").count() == 2
