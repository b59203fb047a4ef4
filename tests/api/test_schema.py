"""The OpenAPI document and the Swagger UI page."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db

CONTRACT = {
    ("post", "/api/v1/runs/"),
    ("get", "/api/v1/runs/"),
    ("get", "/api/v1/runs/{id}/"),
    ("get", "/api/v1/runs/{id}/history/"),
    ("post", "/api/v1/runs/{id}/signals/"),
    ("post", "/api/v1/runs/{id}/cancel/"),
    ("post", "/api/v1/runs/{id}/retry/"),
    ("post", "/api/v1/runs/{id}/migrate/"),
    ("get", "/api/v1/tasks/"),
    ("post", "/api/v1/tasks/{id}/complete/"),
    ("post", "/api/v1/tasks/{id}/reassign/"),
    ("get", "/api/v1/definitions/"),
    ("post", "/api/v1/definitions/"),
    ("put", "/api/v1/activations/{scope}/{definition_id}/"),
    ("delete", "/api/v1/activations/{scope}/{definition_id}/"),
} | {
    ("post", f"/api/v1/definitions/{{scope}}/{{definition_id}}/{{version}}/{action}/")
    for action in ("publish", "deprecate", "retire", "reinstate")
}


@pytest.fixture
def spec() -> dict:
    import json

    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return dict(json.loads(response.content))


def operations(spec: dict) -> list[tuple[str, str, dict]]:
    return [(m, p, op) for p, item in spec["paths"].items() for m, op in item.items()]


def test_the_schema_is_openapi_3_with_every_endpoint_of_the_contract(spec: dict) -> None:
    assert spec["openapi"].startswith("3.")
    assert {(m, p) for m, p, _ in operations(spec)} >= CONTRACT


def test_every_operation_documents_its_errors_as_problem_json(spec: dict) -> None:
    for method, path, op in operations(spec):
        responses = op["responses"]
        expected = {"401", "403", "406", "429"}
        if "requestBody" in op:
            expected |= {"400", "413", "415"}
        if "{id}" in path or "{version}" in path:
            expected |= {"404"}
        assert expected <= set(responses), (method, path, expected - set(responses))
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                assert list(response["content"]) == ["application/problem+json"], (method, path, status)
                assert response["description"], (method, path, status)


def test_retry_after_is_documented_where_a_lock_timeout_can_answer(spec: dict) -> None:
    signal = spec["paths"]["/api/v1/runs/{id}/signals/"]["post"]["responses"]
    assert "Retry-After" in signal["503"]["headers"] and "Retry-After" in signal["429"]["headers"]


def test_swagger_ui_is_served_from_local_static_files() -> None:
    page = Client().get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert assets and all(a.startswith("/static/") for a in assets), assets
    for asset in assets:
        assert finders.find(asset.removeprefix("/static/")), asset
    assert "cdn" not in html.lower()
