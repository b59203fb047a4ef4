"""The contract rules every endpoint follows (docs/development.md, "The API contract"), checked
over the OpenAPI schema so that an endpoint added later is held to them too: every list refuses
unknown and blank query parameters and an out-of-range page_size, every path under /api/
answers problem+json, every problem code has one title, and request components are split
from response components with their bounds."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.api.conftest import assert_problem
from workflows.api import errors
from workflows.exceptions import WorkflowError

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    from workflows.api.urls import SCHEMA_SETTINGS

    with patched_settings(SCHEMA_SETTINGS):
        return dict(SchemaGenerator().get_schema(request=None, public=True))


def _lists() -> list[str]:
    """Every paged list of the schema, its path parameters filled with ids that match their type."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    from workflows.api.urls import SCHEMA_SETTINGS

    with patched_settings(SCHEMA_SETTINGS):
        schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, item in schema["paths"].items():
        operation = item.get("get")
        if not operation:
            continue
        ok = operation["responses"].get("200", {}).get("content", {}).get("application/json", {})
        if not ok.get("schema", {}).get("$ref", "").split("/")[-1].startswith("Paginated"):
            continue
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                kind = parameter["schema"]
                value = str(uuid.UUID(int=0)) if kind.get("format") == "uuid" else "1"
                path = path.replace("{" + parameter["name"] + "}", value)
        found.append(path)
    return sorted(found)


LISTS = _lists()


def test_the_lists_include_every_list_of_the_api() -> None:
    assert {
        "/api/v1/runs/",
        "/api/v1/tasks/",
        "/api/v1/tasks/all/",
        "/api/v1/definitions/",
        "/api/v1/activations/",
        "/api/v1/captures/",
        "/api/v1/migrations/",
        "/api/v1/migrations/1/runs/",
        f"/api/v1/runs/{uuid.UUID(int=0)}/history/",
    } <= set(LISTS)


@pytest.mark.parametrize("path", LISTS)
def test_every_list_refuses_an_unknown_query_parameter(admin_api: APIClient, path: str) -> None:
    body = assert_problem(admin_api.get(path, {"sattus": "OPEN"}), 400, "INVALID_PAYLOAD")
    assert body["violations"] == [{"pointer": "/sattus", "type": "unknown", "message": "not a parameter of this list"}]


@pytest.mark.parametrize("path", [p for p in LISTS if "0000" not in p and "/1/" not in p])  # a parent: 404 first
@pytest.mark.parametrize("size", ["0", "201", "abc"])
def test_every_list_refuses_a_page_size_out_of_range(admin_api: APIClient, path: str, size: str) -> None:
    body = assert_problem(admin_api.get(path, {"page_size": size}), 400, "INVALID_PAYLOAD")
    assert [v["pointer"] for v in body["violations"]] == ["/page_size"]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/v1/runs/", "status"),
        ("/api/v1/tasks/", "due_before"),
        ("/api/v1/definitions/", "status"),
        ("/api/v1/activations/", "scope"),
        ("/api/v1/captures/", "status"),
        ("/api/v1/migrations/", "scope"),
        ("/api/v1/migrations/1/runs/", "status"),
    ],
)
@pytest.mark.parametrize("blank", ["", " \t\u3000"])  # spaces alone: the filters trim them to nothing
def test_a_blank_filter_is_refused_not_read_as_no_filter(
    admin_api: APIClient, path: str, name: str, blank: str
) -> None:
    body = assert_problem(admin_api.get(path, {name: blank}), 400, "INVALID_PAYLOAD")
    assert body["violations"] == [{"pointer": f"/{name}", "type": "blank", "message": "must not be blank"}]


@pytest.mark.parametrize(("value", "status"), [("FAILED,RESOLVED", 200), ("FAILED,NOPE", 400), ("failed", 400)])
def test_the_captures_list_reads_its_statuses_or_refuses_them(admin_api: APIClient, value: str, status: int) -> None:
    response = admin_api.get("/api/v1/captures/", {"status": value})
    assert response.status_code == status, response.content
    if status == 400:
        assert "NOPE" not in response.content.decode() and "failed" not in response.content.decode()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/runs"),
        ("get", "/api/v2/runs/"),
        ("get", "/api/v1/nothing/here/"),
        ("post", "/api/schema/"),
        ("delete", "/api/v1/runs/"),
        ("put", "/api/v1/tasks/"),
    ],
)
def test_every_path_under_api_answers_problem_json(admin_api: APIClient, method: str, path: str) -> None:
    response = getattr(admin_api, method)(path)
    assert response.status_code in (404, 405), (path, response.status_code)
    assert response["Content-Type"].startswith("application/problem+json"), (path, response["Content-Type"])
    body = json.loads(response.content)
    assert body["status"] == response.status_code and body["title"] == errors.titles()[body["code"]]


def test_an_anonymous_request_anywhere_under_api_answers_problem_json() -> None:
    for path in ("/api/v1/runs/", "/api/v1/runs", "/api/v1/captures/", "/api/nowhere"):
        response = Client().get(path)
        assert response.status_code in (401, 404), path
        assert response["Content-Type"].startswith("application/problem+json"), path


def test_every_problem_code_has_one_title() -> None:
    titles = errors.titles()
    classes: list[type[WorkflowError]] = [WorkflowError]
    seen: dict[str, set[str]] = {}
    while classes:
        cls = classes.pop()
        seen.setdefault(cls.code, set()).add(cls.title)
        classes.extend(cls.__subclasses__())
    assert {code: names for code, names in seen.items() if len(names) > 1} == {}
    assert all(titles[code] in names for code, names in seen.items())
    assert titles["INVALID_PAYLOAD"] == "Invalid payload" and titles["PERSISTENCE"] == "Database failure"


def test_a_shape_refusal_and_an_engine_refusal_of_one_code_share_its_title(admin_api: APIClient) -> None:
    shape = assert_problem(admin_api.post("/api/v1/runs/", {}, format="json"), 400, "INVALID_PAYLOAD")
    key = assert_problem(
        admin_api.post(
            "/api/v1/runs/by-key/signals/",
            {"definition_id": "x", "business_key": "   ", "name": "paid"},
            format="json",
        ),
        400,
        "INVALID_PAYLOAD",
    )
    assert shape["title"] == key["title"] == "Invalid payload"


def test_request_components_are_split_from_responses_with_their_bounds(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    start = schemas["StartRunInputRequest"]["properties"]
    assert start["definition_id"]["minLength"] == 1 and start["definition_id"]["maxLength"] == 255
    assert "pattern" in start["definition_id"] and "pattern" in start["scope"]
    assert schemas["SignalByKeyInputRequest"]["properties"]["business_key"]["minLength"] == 1
    assert "minLength" not in schemas["RunOut"]["properties"]["business_key"]
    # every request body names a *Request component or an inline schema, never an output one
    for item in spec["paths"].values():
        for operation in item.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                ref = media["schema"].get("$ref", "")
                assert not ref or ref.endswith("Request"), ref


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        for value in node.values():
            yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


def test_every_pattern_of_the_schema_compiles_as_python_and_as_rust_regular_expressions(spec: dict[str, Any]) -> None:
    """schemathesis compiles patterns with jsonschema-rs (Rust): one it cannot compile (a range
    of surrogates, which a Rust regex has no characters for) is dropped, and it generates values
    without it, as "valid" data (issue #31: scopes with control characters in paths)."""
    import jsonschema_rs

    patterns = sorted(set(_patterns(spec)))
    assert len(patterns) >= 6
    for pattern in patterns:
        re.compile(pattern)
        jsonschema_rs.Draft202012Validator({"pattern": pattern})  # raises for a pattern it cannot compile


def test_every_path_parameter_states_what_it_admits(spec: dict[str, Any]) -> None:
    """An integer, a uuid or a pattern: a path segment never admits just any text (a "/", a
    control character or spaces alone would not name what the endpoint looks up)."""
    for path, item in spec["paths"].items():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "path":
                    continue
                schema = parameter["schema"]
                if schema.get("type") == "integer" or schema.get("format") == "uuid":
                    continue
                pattern = schema.get("pattern")
                assert pattern, (path, parameter["name"])
                for text in ("a/b", "a\x1fb", "a\x85b", " ", ""):
                    assert re.search(pattern, text) is None, (path, parameter["name"], text)


SPACES = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())  # what str.strip() removes


def _strings(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "string":
            yield where, node
        for key, value in node.items():
            yield from _strings(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{where}/{i}")


def _request_strings(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, component in spec["components"]["schemas"].items():
        if name.endswith("Request"):
            yield from _strings(component, name)
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                yield from _strings(parameter["schema"], f"{method} {path} {parameter['in']} {parameter['name']}")
            for media, content in operation.get("requestBody", {}).get("content", {}).items():
                yield from _strings(content["schema"], f"{method} {path} {media}")


def test_a_text_that_must_not_be_blank_states_that_spaces_alone_are_blank(spec: dict[str, Any]) -> None:
    """The API trims texts before it refuses a blank one (DRF, django-filter), so ``minLength: 1``
    alone would admit " " as valid (issue #31: a blank decision, a blank row node); every such
    string of a request states a pattern that refuses spaces alone (base.ContractSchema, the
    filters' schemas)."""
    found = [(where, schema) for where, schema in _request_strings(spec) if schema.get("minLength", 0) >= 1]
    assert len(found) > 30
    for where, schema in found:
        if "enum" in schema or schema.get("format") in ("date-time", "uuid", "json-object"):
            continue
        pattern = schema.get("pattern")
        assert pattern, where
        for text in (SPACES, " ", "\t", "\x1c", "\u3000"):
            assert re.search(pattern, text) is None, (where, text)


WEBHOOK = {"url": "https://hooks.example.com/in", "events": ["run.completed"]}
MIGRATION = {"definition_id": "api-purchase", "source_version": 1, "target_version": 1, "rows": []}
ROW = {"node": "review", "kind": "TASK", "action": "end", "runs": "all"}


@pytest.mark.parametrize(
    ("path", "body", "pointer"),
    [
        ("/api/v1/webhooks/", {**WEBHOOK, "description": 0}, "/description"),  # found by schemathesis
        ("/api/v1/webhooks/", {**WEBHOOK, "active": "yes"}, "/active"),
        ("/api/v1/webhooks/", {**WEBHOOK, "active": 1}, "/active"),
        ("/api/v1/migrations/", {**MIGRATION, "source_version": "1"}, "/source_version"),
        ("/api/v1/migrations/", {**MIGRATION, "apply": "true"}, "/apply"),
        ("/api/v1/migrations/", {**MIGRATION, "rows": [ROW, {**ROW, "node": 7}]}, "/rows/1/node"),
        ("/api/v1/runs/", {"definition_id": "api-purchase", "version": "1"}, "/version"),
        ("/api/v1/runs/by-key/signals/", {"definition_id": "d", "business_key": "k", "name": 5}, "/name"),
        ("/api/v1/bulk-operations/", {"action": "cancel", "run_ids": [str(uuid.UUID(int=1))], "reason": 5}, "/reason"),
    ],
)
def test_a_value_of_another_json_type_is_refused_not_coerced(
    admin_api: APIClient, path: str, body: dict[str, Any], pointer: str
) -> None:
    """The schema states each member's JSON type; DRF's fields would read 0 as the text "0",
    "1" as an integer and 1 or "yes" as true (issue #31: a webhook with ``"description": 0``
    was created). Such a value is refused where it stands, with no value repeated."""
    problem = assert_problem(admin_api.post(path, body, format="json"), 400, "INVALID_PAYLOAD")
    assert [(v["pointer"], v["type"]) for v in problem["violations"]] == [(pointer, "invalid")]
