"""Definitions and activation records through the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.api import documents
from tests.api.conftest import assert_problem

pytestmark = pytest.mark.django_db

SHAPE = {"scope", "definition_id", "version", "status", "plan_hash"}


def test_a_loaded_document_is_a_candidate_and_loading_it_again_changes_nothing(admin_api: APIClient) -> None:
    first = admin_api.post(
        "/api/v1/definitions/", {"scope": "default", "format": "yaml", "text": documents.purchase(1)}, format="json"
    )
    assert first.status_code == 201
    assert set(first.json()) == SHAPE
    assert first.json()["status"] == "CANDIDATE" and first.json()["version"] == 1
    again = admin_api.post("/api/v1/definitions/", {"text": documents.purchase(1)}, format="json")
    assert again.status_code == 201 and again.json() == first.json()


def test_a_yaml_body_is_loaded_into_the_scope_named_in_the_query(admin_api: APIClient) -> None:
    loaded = admin_api.post(
        "/api/v1/definitions/?scope=tenant-a", documents.purchase(1), content_type="application/yaml"
    )
    assert loaded.status_code == 201, loaded.content
    assert loaded.json()["scope"] == "tenant-a"


def test_a_json_document_loads(admin_api: APIClient) -> None:
    import json

    import yaml

    text = json.dumps(yaml.safe_load(documents.purchase(3)))
    loaded = admin_api.post("/api/v1/definitions/", {"format": "json", "text": text}, format="json")
    assert loaded.status_code == 201, loaded.content
    assert loaded.json()["version"] == 3


def test_the_lifecycle_answers_the_record_after_each_transition(
    admin_api: APIClient, deployed: Callable[..., Any]
) -> None:
    deployed(1)
    deployed(2)
    base = "/api/v1/definitions/default/api-purchase/1"
    for action, status in [("deprecate", "DEPRECATED"), ("retire", "RETIRED"), ("reinstate", "AVAILABLE")]:
        response = admin_api.post(f"{base}/{action}/")
        assert response.status_code == 200, response.content
        assert set(response.json()) == SHAPE and response.json()["status"] == status


def test_the_list_filters_by_scope_id_and_status_and_pages(admin_api: APIClient, deployed: Callable[..., Any]) -> None:
    deployed(1)
    admin_api.post("/api/v1/definitions/", {"text": documents.purchase(2)}, format="json")
    admin_api.post("/api/v1/definitions/", {"scope": "tenant-a", "text": documents.purchase(1)}, format="json")

    def listed(**params: Any) -> list[tuple[str, int, str]]:
        rows = admin_api.get("/api/v1/definitions/", params).json()["results"]
        return [(r["scope"], r["version"], r["status"]) for r in rows]

    assert listed() == [("default", 1, "AVAILABLE"), ("default", 2, "CANDIDATE"), ("tenant-a", 1, "CANDIDATE")]
    assert listed(scope="tenant-a") == [("tenant-a", 1, "CANDIDATE")]
    assert listed(status="CANDIDATE", definition_id="api-purchase") == [
        ("default", 2, "CANDIDATE"),
        ("tenant-a", 1, "CANDIDATE"),
    ]
    page = admin_api.get("/api/v1/definitions/", {"page_size": 2}).json()
    assert len(page["results"]) == 2 and page["previous"] is None
    rest = admin_api.get(page["next"]).json()
    assert [r["scope"] for r in rest["results"]] == ["tenant-a"] and rest["next"] is None
    assert len(admin_api.get(rest["previous"]).json()["results"]) == 2


def test_a_scope_activates_the_default_scopes_version_then_follows_the_default_again(
    admin_api: APIClient, deployed: Callable[..., Any]
) -> None:
    deployed(1)
    activated = admin_api.put(
        "/api/v1/activations/tenant-a/api-purchase/", {"version": 1, "target_scope": "default"}, format="json"
    )
    assert activated.status_code == 200
    assert {k: activated.json()[k] for k in ("scope", "definition_id", "target_scope", "version", "updated_by")} == {
        "scope": "tenant-a",
        "definition_id": "api-purchase",
        "target_scope": "default",
        "version": 1,
        "updated_by": "root",
    }
    listed = admin_api.get("/api/v1/activations/", {"scope": "tenant-a"}).json()["results"]
    assert [(a["scope"], a["version"]) for a in listed] == [("tenant-a", 1)]
    assert admin_api.delete("/api/v1/activations/tenant-a/api-purchase/").status_code == 204
    assert admin_api.get("/api/v1/activations/", {"scope": "tenant-a"}).json()["results"] == []


def test_deactivating_the_default_leaves_starts_without_a_current_version(
    admin_api: APIClient, deployed: Callable[..., Any]
) -> None:
    deployed(1)
    assert admin_api.delete("/api/v1/activations/default/api-purchase/").status_code == 204
    response = admin_api.post(
        "/api/v1/runs/", {"definition_id": "api-purchase", "payload": {"number": "PO-1", "total": 1}}, format="json"
    )
    assert_problem(response, 422, "NO_CURRENT_VERSION")


def test_a_yaml_syntax_error_names_the_reason_line_and_column(admin_api: APIClient) -> None:
    text = documents.purchase(1).replace("initialStep: wait-payment", "initialStep: wait-payment\n  extra: 1")
    refused = admin_api.post("/api/v1/definitions/", {"format": "yaml", "text": text}, format="json")
    body = assert_problem(refused, 422, "DEFINITION_INVALID")
    [violation] = body["violations"]
    assert violation["type"] == "syntax" and violation["pointer"] == ""
    assert violation["message"].startswith("not valid YAML: mapping values are not allowed")
    assert (violation["line"], violation["column"]) == (14, 8)


def test_a_cel_problem_names_its_column_in_the_expression_and_in_the_document(admin_api: APIClient) -> None:
    text = documents.purchase(1).replace("set: \"{'paid': payload.amount}\"", "set: \"{'paid': payload.amount +}\"")
    refused = admin_api.post("/api/v1/definitions/", {"format": "yaml", "text": text}, format="json")
    body = assert_problem(refused, 422, "DEFINITION_INVALID")
    [violation] = body["violations"]
    assert violation == {
        "pointer": "/steps/0/set",
        "type": "expression",
        "message": "expression does not parse as CEL: column 26: unexpected '}'",
        "line": 18,
        "column": 36,
        "expressionColumn": 26,
    }
