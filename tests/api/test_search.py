"""Search on the list endpoints (issue #31): every run and task filter, combined, ordering,
refusals (bad values, unknown parameters, page_size bounds; value-free), the operators' task
list, problem+json for any path under /api/, and the GIN index behind ``?state=``."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.api.conftest import SENTINEL
from workflows.models import Run, Task

pytestmark = pytest.mark.django_db

UTC = datetime.UTC
T0 = datetime.datetime(2026, 1, 1, tzinfo=UTC)


def at(hours: int) -> datetime.datetime:
    return T0 + datetime.timedelta(hours=hours)


def make_run(key: str, *, hours: int, **fields: Any) -> Run:
    defaults: dict[str, Any] = {
        "definition_id": "orders",
        "version": 1,
        "plan_hash": "0" * 64,
        "status": "WAITING",
        "current_step": "review",
        "business_key": key,
        "state": {},
    }
    run = Run.objects.create(**{**defaults, **fields})
    # created_at / updated_at are set by the model: place them where the test needs them
    Run.objects.filter(pk=run.pk).update(created_at=at(hours), updated_at=at(hours + 100 - hours * 2))
    return run


@pytest.fixture
def runs() -> dict[str, Run]:
    return {
        "eu": make_run("K-eu", hours=1, state={"region": "EU", "amount": Decimal("1000.10"), "tags": ["a", "b"]}),
        "us": make_run(
            "K-us",
            hours=2,
            state={"region": "US", "amount": 5},
            definition_id="invoices",
            version=2,
            current_step="pay",
            subject_type="demo.order",
            subject_id="17",
        ),
        "done": make_run(
            "K-done",
            hours=3,
            state={"region": "EU", "nested": {"x": 1}},
            status="COMPLETED",
            current_step="end",
            ended_at=at(4),
        ),
    }


@pytest.fixture
def reader_api(make_user: Callable[..., Any], client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(make_user("reader", "workflows.view_run"))


def keys(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [r["business_key"] for r in response.json()["results"]]


def problem(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert SENTINEL not in response.content.decode()
    body = response.json()
    assert body["code"] == "INVALID_PAYLOAD"
    return body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["K-done", "K-us", "K-eu"]),
        ({"status": "WAITING"}, ["K-us", "K-eu"]),
        ({"status": ["COMPLETED", "FAILED"]}, ["K-done"]),
        ({"definition_id": "invoices"}, ["K-us"]),
        ({"version": "2"}, ["K-us"]),
        ({"scope": "default"}, ["K-done", "K-us", "K-eu"]),
        ({"step": "pay"}, ["K-us"]),
        ({"business_key": "K-eu"}, ["K-eu"]),
        ({"subject_type": "demo.order"}, ["K-us"]),
        ({"subject_id": "17"}, ["K-us"]),
        ({"created_after": "2026-01-01T02:00:00Z"}, ["K-done", "K-us"]),
        ({"created_before": "2026-01-01T02:00:00+00:00"}, ["K-eu"]),
        ({"created_after": "2026-01-01T03:00:00+01:00"}, ["K-done", "K-us"]),  # an offset counts
        ({"created_after": "2026-01-01T02:00:00"}, ["K-done", "K-us"]),  # no offset: UTC
        ({"updated_after": "2026-01-05T02:00:00Z"}, ["K-us", "K-eu"]),
        ({"updated_before": "2026-01-05T02:00:00Z"}, ["K-done"]),
        ({"ended_after": "2026-01-01T04:00:00Z"}, ["K-done"]),
        ({"ended_before": "2026-01-01T04:00:00Z"}, []),
        ({"state": '{"region": "EU"}'}, ["K-done", "K-eu"]),
        ({"state": '{"amount": 1000.10}'}, ["K-eu"]),
        ({"state": '{"amount": 1000.1}'}, ["K-eu"]),  # numerically equal
        ({"state": '{"tags": ["b"]}'}, ["K-eu"]),  # containment, not equality
        ({"state": '{"nested": {"x": 1}}'}, ["K-done"]),
        ({"state": '{"region": "EU", "amount": 5}'}, []),
        ({"state": "{}"}, ["K-done", "K-us", "K-eu"]),
        # combined
        ({"state": '{"region": "EU"}', "status": "WAITING"}, ["K-eu"]),
        ({"definition_id": "orders", "created_after": "2026-01-01T02:00:00Z"}, ["K-done"]),
    ],
)
def test_each_run_filter_and_combinations(
    runs: dict[str, Run], reader_api: APIClient, query: dict[str, Any], expected: list[str]
) -> None:
    assert keys(reader_api.get("/api/v1/runs/", query)) == expected


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        (None, ["K-done", "K-us", "K-eu"]),
        ("-created_at", ["K-done", "K-us", "K-eu"]),
        ("created_at", ["K-eu", "K-us", "K-done"]),
        ("updated_at", ["K-done", "K-us", "K-eu"]),
        ("-updated_at", ["K-eu", "K-us", "K-done"]),
    ],
)
def test_ordering(runs: dict[str, Run], reader_api: APIClient, ordering: str | None, expected: list[str]) -> None:
    query = {} if ordering is None else {"ordering": ordering}
    assert keys(reader_api.get("/api/v1/runs/", query)) == expected


def test_the_cursor_pages_in_the_requested_order(runs: dict[str, Run], reader_api: APIClient) -> None:
    first = reader_api.get("/api/v1/runs/", {"ordering": "created_at", "page_size": 2})
    assert keys(first) == ["K-eu", "K-us"]
    assert "ordering=created_at" in first.json()["next"]
    assert keys(reader_api.get(first.json()["next"])) == ["K-done"]


@pytest.mark.parametrize(
    ("query", "pointer"),
    [
        ({"status": "ASLEEP"}, "/status"),
        ({"version": "zero"}, "/version"),
        ({"version": "0"}, "/version"),
        ({"version": "99999999999"}, "/version"),
        ({"created_after": "yesterday"}, "/created_after"),
        ({"ended_before": "2026-13-01T00:00:00Z"}, "/ended_before"),
        ({"business_key": "k" * 256}, "/business_key"),
        ({"state": "[1, 2]"}, "/state"),
        ({"state": '{"region": '}, "/state"),
        ({"state": '{"n": NaN}'}, "/state"),
        ({"state": '{"n": 1e400}'}, "/state"),
        ({"state": "[" * 3000 + "]" * 3000}, "/state"),
        ({"state": json.dumps({"k": "v" * 5000})}, "/state"),
        ({"ordering": "business_key"}, "/ordering"),
        ({"ordering": "created_at,id"}, "/ordering"),
    ],
)
def test_a_bad_value_is_refused_naming_the_parameter(
    runs: dict[str, Run], reader_api: APIClient, query: dict[str, str], pointer: str
) -> None:
    name = pointer.rsplit("/", 1)[1]
    query = {k: f"{v}{SENTINEL}" if k in ("status", "ordering") else v for k, v in query.items()}
    body = problem(reader_api.get("/api/v1/runs/", query))
    assert [v["pointer"] for v in body["violations"]] == [pointer]
    assert name in pointer and SENTINEL not in json.dumps(body)


def test_a_bad_value_in_a_json_document_is_not_repeated(reader_api: APIClient) -> None:
    body = problem(reader_api.get("/api/v1/runs/", {"state": f'["{SENTINEL}"]'}))
    assert body["violations"] == [{"pointer": "/state", "type": "json", "message": "must be a JSON object"}]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs/",
        "/api/v1/tasks/",
        "/api/v1/tasks/all/",
        "/api/v1/definitions/",
        "/api/v1/activations/",
    ],
)
def test_an_unknown_parameter_is_refused_by_every_list(admin_api: APIClient, path: str) -> None:
    body = problem(admin_api.get(path, {"statsu": SENTINEL, f"<{SENTINEL}>": "1", "page_size": "5"}))
    assert body["detail"] == "unknown query parameters"
    assert [v["pointer"] for v in body["violations"]] == ["", "/statsu"]  # a non-name not repeated
    assert all(v["type"] == "unknown" for v in body["violations"])


def test_an_unknown_parameter_is_refused_by_the_history(runs: dict[str, Run], reader_api: APIClient) -> None:
    body = problem(reader_api.get(f"/api/v1/runs/{runs['eu'].id}/history/", {"status": "x"}))
    assert [v["pointer"] for v in body["violations"]] == ["/status"]


@pytest.mark.parametrize(
    "path", ["/api/v1/runs/", "/api/v1/tasks/", "/api/v1/definitions/", "/api/v1/activations/", "HISTORY"]
)
@pytest.mark.parametrize("size", ["0", "201", "-1", "abc", "", "1.5", "²", "10000"])
def test_page_size_out_of_range_is_refused(runs: dict[str, Run], admin_api: APIClient, path: str, size: str) -> None:
    path = f"/api/v1/runs/{runs['eu'].id}/history/" if path == "HISTORY" else path
    body = problem(admin_api.get(path, {"page_size": size}))
    assert body["violations"] == [
        {"pointer": "/page_size", "type": "range", "message": "must be an integer from 1 to 200"}
    ]


@pytest.mark.parametrize("size", ["1", "200"])
def test_page_size_bounds_are_accepted(runs: dict[str, Run], reader_api: APIClient, size: str) -> None:
    page = reader_api.get("/api/v1/runs/", {"page_size": size})
    assert len(keys(page)) == min(int(size), 3)


# --- tasks ---------------------------------------------------------------------------------------


@pytest.fixture
def tasks(runs: dict[str, Run]) -> dict[str, Task]:
    def task(name: str, run: Run, **fields: Any) -> Task:
        defaults = {"step": "review", "title": name, "assignment_mode": "group", "assignment_value": "approvers"}
        return Task.objects.create(run=run, **{**defaults, **fields})

    return {
        "open": task("open", runs["eu"], due_at=at(10)),
        "later": task("later", runs["us"], due_at=at(20), assignment_value="buyers"),
        "mine": task("mine", runs["eu"], assignment_mode="user", assignment_value="alice"),
        "closed": task("closed", runs["done"], status="COMPLETED", due_at=at(5)),
        "nobody": task("nobody", runs["us"], assignment_value="auditors"),
    }


def titles(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(t["title"] for t in response.json()["results"])


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["later", "mine", "open"]),
        ({"status": "COMPLETED"}, ["closed"]),
        ({"status": ["OPEN", "COMPLETED"]}, ["closed", "later", "mine", "open"]),
        ({"definition_id": "invoices"}, ["later"]),
        ({"group": "approvers"}, ["open"]),
        ({"group": "alice"}, []),  # a user assignment is no group
        ({"due_after": "2026-01-01T10:00:00Z"}, ["later", "open"]),
        ({"due_before": "2026-01-01T20:00:00Z", "status": ["OPEN", "COMPLETED"]}, ["closed", "open"]),
        ({"definition_id": "orders", "group": "approvers", "due_before": "2026-01-02T00:00:00Z"}, ["open"]),
    ],
)
def test_my_tasks_filters(
    tasks: dict[str, Task],
    make_user: Callable[..., Any],
    client_for: Callable[..., APIClient],
    query: dict[str, Any],
    expected: list[str],
) -> None:
    alice = client_for(make_user("alice", groups=("approvers", "buyers")))
    assert titles(alice.get("/api/v1/tasks/", query)) == expected


def test_completed_tasks_of_others_stay_hidden(
    tasks: dict[str, Task], make_user: Callable[..., Any], client_for: Callable[..., APIClient]
) -> None:
    bob = client_for(make_user("bob", groups=("buyers",)))
    assert titles(bob.get("/api/v1/tasks/", {"status": ["OPEN", "COMPLETED"]})) == ["later"]


def test_operators_list_every_task(
    tasks: dict[str, Task], make_user: Callable[..., Any], client_for: Callable[..., APIClient]
) -> None:
    operator = client_for(make_user("operator", "workflows.change_command"))
    assert titles(operator.get("/api/v1/tasks/all/")) == ["later", "mine", "nobody", "open"]
    assert titles(operator.get("/api/v1/tasks/all/", {"group": "auditors"})) == ["nobody"]
    assert titles(operator.get("/api/v1/tasks/all/", {"status": "COMPLETED"})) == ["closed"]
    assert operator.get("/api/v1/tasks/", {}).json()["results"] == []  # their own: none

    page = operator.get("/api/v1/tasks/all/", {"page_size": 3})
    assert len(page.json()["results"]) == 3 and page.json()["next"]


def test_the_operators_task_list_needs_the_operate_capability(
    tasks: dict[str, Task], make_user: Callable[..., Any], client_for: Callable[..., APIClient]
) -> None:
    alice = client_for(make_user("alice", groups=("approvers",)))
    refused = alice.get("/api/v1/tasks/all/")
    assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"
    assert client_for(None).get("/api/v1/tasks/all/").status_code == 401


# --- any path under /api/ ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v2/runs/", "/api/nothing", "/api/v1/runs/x/y/z/", "/api/schema/extra/"])
def test_any_unknown_path_under_api_is_a_problem_404(admin_api: APIClient, path: str) -> None:
    response = admin_api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "NOT_FOUND"


# --- the schema ----------------------------------------------------------------------------------


def test_the_filters_are_in_the_schema_with_their_types(admin_api: APIClient) -> None:
    spec = admin_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    runs = {p["name"]: p["schema"] for p in spec["paths"]["/api/v1/runs/"]["get"]["parameters"]}
    assert runs["status"]["type"] == "array" and "WAITING" in runs["status"]["items"]["enum"]
    assert runs["version"] == {"type": "integer", "minimum": 1, "maximum": 2_147_483_647}
    assert runs["created_after"] == {"type": "string", "format": "date-time"}
    assert runs["ended_before"] == {"type": "string", "format": "date-time"}
    assert runs["state"]["type"] == "string"
    assert runs["ordering"]["enum"] == ["-created_at", "created_at", "-updated_at", "updated_at"]
    assert runs["page_size"]["maximum"] == 200
    for path in ("/api/v1/tasks/", "/api/v1/tasks/all/"):
        tasks = {p["name"]: p["schema"] for p in spec["paths"][path]["get"]["parameters"]}
        assert {"status", "definition_id", "group", "due_after", "due_before", "cursor", "page_size"} <= set(tasks)
        assert tasks["due_after"]["format"] == "date-time"


# --- the index behind ?state= --------------------------------------------------------------------


def test_state_containment_uses_the_gin_index(reader_api: APIClient) -> None:
    regions = ["EU", "US", "APAC", "LATAM"]
    Run.objects.bulk_create(
        Run(
            definition_id="bulk",
            version=1,
            plan_hash="0" * 64,
            status="WAITING",
            business_key=f"B-{i}",
            state={"region": regions[i % 4], "n": i, "customer": f"c{i}"},
        )
        for i in range(4000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE workflow_runs")

    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from workflows.api.filters import RunSearch
    from workflows.queries import runs as all_runs

    request = Request(APIRequestFactory().get("/api/v1/runs/", {"state": '{"customer": "c1234"}'}))
    found = RunSearch.search(request, all_runs())
    plan = found.explain()
    assert "workflow_run_state" in plan, plan
    assert [r.business_key for r in found] == ["B-1234"]
    assert keys(reader_api.get("/api/v1/runs/", {"state": '{"customer": "c1234"}'})) == ["B-1234"]
