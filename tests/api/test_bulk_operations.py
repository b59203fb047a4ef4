"""The bulk operations API (/api/v1/bulk-operations/): freeze a selection (a filter of the
runs list, or ids), read the record's progress and each run's outcome; refusals are
problem+json, value-free, and freeze nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.api.conftest import SENTINEL, assert_problem
from workflows import conf, operations
from workflows.models import BulkOperation, BulkOperationItem, HistoryEntry, Run

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/bulk-operations/"


@pytest.fixture
def runs(deployed: Callable[..., dict[str, Any]], drain: Callable[..., int]) -> dict[str, list[str]]:
    """Three purchases waiting for payment, one of them (EU) with a larger total; one completed."""
    deployed()
    waiting = [
        operations.start(definition_id="api-purchase", payload={"number": f"P-{i}", "total": 10 + i}).run_id
        for i in range(3)
    ]
    done = operations.start(definition_id="api-purchase", payload={"number": "P-9", "total": 1}).run_id
    drain()
    operations.signal(run_id=done, name="paid", payload={"amount": 1})
    drain()
    operations.cancel(run_id=done, reason="closed")
    return {"waiting": waiting, "ended": [done]}


def finish(operation_id: int) -> None:
    """What the Celery task does, in-process."""
    while not operations.bulk_operation_apply_batch(operation_id=operation_id).done:
        pass


@pytest.fixture
def canceller(make_user: Callable[..., User], client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(make_user("canceller", "workflows.cancel_runs", "workflows.view_run"))


def test_cancel_by_filter_freezes_the_matching_runs_and_answers_202_with_the_record(
    runs: dict[str, list[str]], canceller: APIClient
) -> None:
    answer = canceller.post(
        URL,
        {"action": "cancel", "filter": {"definition_id": "api-purchase", "status": ["WAITING"]}, "reason": "recall"},
        format="json",
    )
    assert answer.status_code == 202, answer.content
    record = answer.json()
    assert answer["Location"] == record["url"] == f"{URL}{record['id']}/"
    assert (record["status"], record["total"], record["selection"], record["created_by"]) == (
        "PENDING",
        3,
        "filter",
        "canceller",
    )
    assert record["filter"] == {"definition_id": "api-purchase", "status": ["WAITING"]}
    assert record["counts"] == {"PENDING": 3, "APPLIED": 0, "REFUSED": 0, "FAILED": 0}
    # the selection is fixed: a run started now is not part of it
    operations.start(definition_id="api-purchase", payload={"number": "P-late", "total": 1})

    finish(record["id"])
    read = canceller.get(record["url"]).json()
    assert (read["status"], read["done"], read["left"], read["counts"]["APPLIED"]) == ("DONE", 3, 0, 3)
    assert read["finished_at"] is not None
    assert set(Run.objects.filter(pk__in=runs["waiting"]).values_list("status", flat=True)) == {"CANCELLED"}
    cancelled = HistoryEntry.objects.filter(run_id__in=runs["waiting"], type="WORKFLOW_CANCELLED")
    assert {(e.actor_kind, e.actor_id) for e in cancelled} == {("USER", "canceller")}
    assert Run.objects.filter(business_key="", status="PENDING").count() == 1  # the late run


def test_signal_by_ids_gives_each_run_its_outcome(
    runs: dict[str, list[str]],
    make_user: Callable[..., User],
    client_for: Callable[..., APIClient],
    drain: Callable[..., int],
) -> None:
    api = client_for(make_user("payer", "workflows.change_run"))
    chosen = [*runs["waiting"][:2], *runs["ended"]]
    answer = api.post(
        URL,
        {"action": "signal", "run_ids": chosen, "signal": {"name": "paid", "payload": {"amount": 5, "note": SENTINEL}}},
        format="json",
    )
    assert answer.status_code == 202, answer.content
    record = answer.json()
    assert record["signal"] == {"name": "paid"} and SENTINEL not in answer.content.decode()

    finish(record["id"])
    results = api.get(f"{URL}{record['id']}/results/").json()["results"]
    assert [r["run"] for r in results] == chosen  # in the order asked for
    by_run = {r["run"]: r for r in results}
    ended = by_run[runs["ended"][0]]
    assert (ended["outcome"], ended["code"], ended["command"]) == ("REFUSED", "SIGNAL_REJECTED", None)
    assert ended["detail"] and SENTINEL not in ended["detail"]
    for run_id in runs["waiting"][:2]:
        assert by_run[run_id]["outcome"] == "APPLIED" and isinstance(by_run[run_id]["command"], int)
    refused = api.get(f"{URL}{record['id']}/results/?outcome=REFUSED").json()["results"]
    assert [r["run"] for r in refused] == runs["ended"]
    drain()
    paid = Run.objects.filter(pk__in=runs["waiting"][:2]).values_list("current_step", flat=True)
    assert set(paid) == {"review"}


def test_results_page_by_cursor(runs: dict[str, list[str]], admin_api: APIClient) -> None:
    record = admin_api.post(URL, {"action": "retry", "run_ids": runs["waiting"]}, format="json").json()
    finish(record["id"])
    first = admin_api.get(f"{URL}{record['id']}/results/?page_size=2").json()
    assert len(first["results"]) == 2 and first["next"]
    rest = admin_api.get(first["next"]).json()
    assert [r["run"] for r in first["results"] + rest["results"]] == runs["waiting"]
    # nothing to retry on a waiting run: refused, each with its code
    assert {r["code"] for r in first["results"] + rest["results"]} == {"SIGNAL_REJECTED"}
    listed = admin_api.get(f"{URL}?action=retry").json()["results"]
    assert [r["id"] for r in listed] == [record["id"]] and listed[0]["status"] == "DONE"


NO_RUN = "7d1c2c53-7c1f-4b9c-9d0e-3b8f0e1f2a3b"
BAD_BODIES: list[tuple[Callable[[str], dict[str, Any]], str, str]] = [
    (lambda run: {"action": "explode", "run_ids": [run]}, "/action", "invalid_choice"),
    (lambda run: {"action": "cancel"}, "", "one_of"),
    (lambda run: {"action": "cancel", "filter": {"status": ["WAITING"]}, "run_ids": [run]}, "", "one_of"),
    (lambda run: {"action": "cancel", "filter": {}}, "/filter", "required"),
    # issue #40: the guard looks into the members ({} is contained in every state)
    (lambda run: {"action": "cancel", "filter": {"state": {}}}, "/filter", "required"),
    (lambda run: {"action": "cancel", "filter": {"state": " {} "}}, "/filter", "required"),
    (lambda run: {"action": "cancel", "filter": {"stauts": SENTINEL}}, "/filter/stauts", "unknown"),
    (lambda run: {"action": "cancel", "filter": {"created_after": SENTINEL}}, "/filter/created_after", "instant"),
    (lambda run: {"action": "cancel", "filter": {"status": [SENTINEL]}}, "/filter/status", "invalid_choice"),
    (lambda run: {"action": "cancel", "filter": {"state": [SENTINEL]}}, "/filter/state", "json"),
    (lambda run: {"action": "cancel", "filter": {"version": True}}, "/filter/version", "invalid"),
    # each member of the JSON type the schema states: no text for an integer, no number for a text
    (lambda run: {"action": "cancel", "filter": {"version": "1"}}, "/filter/version", "invalid"),
    (lambda run: {"action": "cancel", "filter": {"definition_id": 5}}, "/filter/definition_id", "invalid"),
    (lambda run: {"action": "cancel", "filter": {"scope": ["a", "b"]}}, "/filter/scope", "invalid"),
    (lambda run: {"action": "cancel", "filter": {"definition_id": " "}}, "/filter/definition_id", "blank"),
    (lambda run: {"action": "cancel", "filter": {"page_size": 5}}, "/filter/page_size", "unknown"),
    (lambda run: {"action": "cancel", "run_ids": [run, NO_RUN]}, "/run_ids/1", "not_found"),
    (lambda run: {"action": "cancel", "run_ids": [SENTINEL]}, "/run_ids/0", "invalid"),
    (lambda run: {"action": "signal", "run_ids": [run]}, "/signal", "required"),
    (lambda run: {"action": "signal", "run_ids": [run], "signal": {"payload": {}}}, "/signal/name", "required"),
]


@pytest.mark.parametrize(("body", "pointer", "kind"), BAD_BODIES)
def test_bad_input_is_refused_value_free_and_freezes_nothing(
    runs: dict[str, list[str]],
    admin_api: APIClient,
    body: Callable[[str], dict[str, Any]],
    pointer: str,
    kind: str,
) -> None:
    answer = admin_api.post(URL, body(runs["waiting"][0]), format="json")
    problem = assert_problem(answer, 400, "INVALID_PAYLOAD")
    assert {"pointer": pointer, "type": kind} in [{k: v[k] for k in ("pointer", "type")} for v in problem["violations"]]
    assert not BulkOperation.objects.exists()


@pytest.fixture
def at_most_two(settings: Any) -> Iterator[None]:
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "BULK": {"MAX_RUNS": 2}}
    conf.reload()
    yield
    conf.get.cache_clear()


def test_a_selection_over_the_bound_is_refused(
    runs: dict[str, list[str]], admin_api: APIClient, at_most_two: None
) -> None:
    by_filter = admin_api.post(URL, {"action": "cancel", "filter": {"definition_id": "api-purchase"}}, format="json")
    problem = assert_problem(by_filter, 400, "INVALID_PAYLOAD")
    assert problem["violations"][0]["pointer"] == "/filter" and problem["violations"][0]["type"] == "max_items"
    by_ids = admin_api.post(URL, {"action": "cancel", "run_ids": runs["waiting"]}, format="json")
    assert assert_problem(by_ids, 400, "INVALID_PAYLOAD")["violations"][0]["pointer"] == "/run_ids"
    assert not BulkOperation.objects.exists()
    assert admin_api.post(URL, {"action": "cancel", "run_ids": runs["waiting"][:2]}, format="json").status_code == 202


def test_the_action_needs_its_own_capability(
    runs: dict[str, list[str]], make_user: Callable[..., User], client_for: Callable[..., APIClient]
) -> None:
    retrier = client_for(make_user("retrier", "workflows.change_run"))  # signal and retry, not cancel
    refused = retrier.post(URL, {"action": "cancel", "run_ids": runs["waiting"]}, format="json")
    body = assert_problem(refused, 403, "PERMISSION_DENIED")
    assert "cancel runs" in body["detail"]
    nobody = client_for(make_user("viewer", "workflows.view_run"))
    assert_problem(
        nobody.post(URL, {"action": "retry", "run_ids": runs["waiting"]}, format="json"), 403, "PERMISSION_DENIED"
    )
    assert nobody.get(URL).status_code == 200
    assert_problem(client_for(make_user("plain")).get(URL), 403, "PERMISSION_DENIED")
    assert not BulkOperation.objects.exists()
    assert set(Run.objects.filter(pk__in=runs["waiting"]).values_list("status", flat=True)) == {"WAITING"}


def test_an_idempotency_key_answers_the_first_record(runs: dict[str, list[str]], canceller: APIClient) -> None:
    body = {"action": "cancel", "filter": {"status": ["WAITING"]}, "reason": "recall"}
    first = canceller.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="recall-1")
    again = canceller.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="recall-1")
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    other = canceller.post(URL, {**body, "reason": "another"}, format="json", HTTP_IDEMPOTENCY_KEY="recall-1")
    assert_problem(other, 409, "IDEMPOTENCY_CONFLICT")
    assert BulkOperation.objects.count() == 1 and BulkOperationItem.objects.count() == 3


def test_an_unknown_record_is_not_found(admin_api: APIClient) -> None:
    assert_problem(admin_api.get(f"{URL}999999/"), 404, "NOT_FOUND")
    assert_problem(admin_api.get(f"{URL}999999/results/"), 404, "NOT_FOUND")


def test_a_filter_reads_as_the_runs_list_reads_it(runs: dict[str, list[str]], admin_api: APIClient) -> None:
    """JSON values where the list takes query text: a number, a JSON object (``state``)."""
    body = {"action": "retry", "filter": {"state": {"number": "P-1"}, "version": 1, "definition_id": "api-purchase"}}
    record = admin_api.post(URL, body, format="json").json()
    listed = admin_api.get("/api/v1/runs/", {"state": '{"number": "P-1"}', "version": 1}).json()["results"]
    assert record["total"] == len(listed) == 1
    assert [i.run_id for i in BulkOperationItem.objects.filter(operation_id=record["id"])] == [
        Run.objects.get(pk=listed[0]["id"]).pk
    ]
