"""Database failures through the API (issue #26, engine.txt 464-465): a transient failure is
503 with Retry-After (retry the request); any other is a 500 that promises nothing, and
neither repeats the driver's text or an exception class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.api.conftest import SENTINEL, assert_problem
from workflows.definitions import schemas
from workflows.models import Run

pytestmark = pytest.mark.services


def schema_check_failing_with(condition: str) -> Callable[..., Any]:
    def validate(schema: Any, payload: Any) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION '{SENTINEL}' USING ERRCODE = '{condition}'; END $$")
        return []

    return validate


def start(api: APIClient) -> Any:
    body = {"definition_id": "api-purchase", "payload": {"number": "PO-9", "total": 10}}
    return api.post("/api/v1/runs/", body, format="json")


@pytest.mark.django_db(transaction=True)
def test_a_deterministic_database_failure_is_500_and_not_retryable(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was 503 with Retry-After: a client retried a request that fails the same way every time."""
    deployed()
    monkeypatch.setattr(schemas, "validate", schema_check_failing_with("check_violation"))
    response = start(admin_api)
    body = assert_problem(response, 500, "PERSISTENCE", leaked=(SENTINEL, "Error"))
    assert "Retry-After" not in response
    assert "23514" in body["detail"]
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_serialization_failure_is_503_with_retry_after(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed()
    monkeypatch.setattr(schemas, "validate", schema_check_failing_with("serialization_failure"))
    response = start(admin_api)
    assert_problem(response, 503, "PERSISTENCE", leaked=(SENTINEL, "Error"))
    assert response["Retry-After"] == "1"
    assert not Run.objects.exists()
