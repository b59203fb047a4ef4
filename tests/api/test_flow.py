"""The integration flow through the API: definitions, start, signal, tasks, history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db(transaction=True)


def test_load_publish_activate_start_signal_complete_and_read_history(
    admin_api: APIClient,
    deployed: Callable[..., dict[str, Any]],
    drain: Callable[..., int],
    make_user: Callable[..., Any],
    client_for: Callable[..., APIClient],
) -> None:
    definition = deployed()
    assert definition["status"] == "AVAILABLE"
    assert set(definition) == {"scope", "definition_id", "version", "status", "plan_hash"}

    started = admin_api.post(
        "/api/v1/runs/",
        {"definition_id": "api-purchase", "business_key": "PO-1", "payload": {"number": "PO-1", "total": 1200}},
        format="json",
    )
    assert started.status_code == 202, started.content
    command = started.json()
    assert set(command) == {"id", "run", "kind", "status", "seq"}
    assert command["kind"] == "START" and command["status"] == "PENDING"
    assert started["Location"] == f"/api/v1/runs/{command['run']}/"

    drain()
    run = admin_api.get(f"/api/v1/runs/{command['run']}/").json()
    assert run["status"] == "WAITING" and run["current_step"] == "wait-payment"
    assert run["waits"][0]["kind"] == "SIGNAL"

    signalled = admin_api.post(
        f"/api/v1/runs/{command['run']}/signals/", {"name": "paid", "payload": {"amount": 5}}, format="json"
    )
    assert signalled.status_code == 202 and signalled.json()["kind"] == "SIGNAL"
    drain()

    alice = client_for(make_user("alice", groups=("approvers",)))
    tasks = alice.get("/api/v1/tasks/").json()
    assert set(tasks) == {"next", "previous", "results"}
    [task] = tasks["results"]
    assert task["title"] == "Approve purchase PO-1"
    assert task["assignment"] == {"mode": "group", "value": "approvers"}
    assert [d["name"] for d in task["decisions"]] == ["approve", "reject"]

    completed = alice.post(
        f"/api/v1/tasks/{task['id']}/complete/", {"decision": "approve", "payload": {"comment": "ok"}}, format="json"
    )
    assert completed.status_code == 202, completed.content
    assert completed.json()["kind"] == "COMPLETION"
    drain()
    assert admin_api.get(f"/api/v1/runs/{command['run']}/").json()["status"] == "COMPLETED"

    history = admin_api.get(f"/api/v1/runs/{command['run']}/history/").json()
    entries = history["results"]
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert set(entries[0]) == {
        "seq",
        "type",
        "at",
        "actor",
        "command",
        "step",
        "outcome",
        "state_version_before",
        "state_version_after",
        "patch",
        "payload",
    }
    kinds = [e["type"] for e in entries]
    assert "WORKFLOW_STARTED" in kinds and "WORKFLOW_COMPLETED" in kinds
    assert {"kind": "USER", "id": "alice", "status": "VERIFIED"} in [e["actor"] for e in entries]


def start(api: APIClient, number: str = "PO-1", **extra: Any) -> Any:
    body = {"definition_id": "api-purchase", "payload": {"number": number, "total": 10}, **extra}
    return api.post("/api/v1/runs/", body, format="json")


def test_runs_are_listed_newest_first_with_filters_and_cursor_pages(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], drain: Callable[..., int]
) -> None:
    deployed()
    ids = [start(admin_api, f"PO-{n}", business_key=f"key-{n}").json()["run"] for n in range(5)]
    drain()
    first = admin_api.get("/api/v1/runs/", {"page_size": 2}).json()
    assert [r["id"] for r in first["results"]] == ids[::-1][:2]
    assert first["previous"] is None
    second = admin_api.get(first["next"]).json()
    assert [r["id"] for r in second["results"]] == ids[::-1][2:4]
    assert [r["id"] for r in admin_api.get(second["previous"]).json()["results"]] == ids[::-1][:2]

    def found(**filters: Any) -> list[str]:
        return [r["id"] for r in admin_api.get("/api/v1/runs/", filters).json()["results"]]

    assert found(business_key="key-3") == [ids[3]]
    assert sorted(found(status="WAITING", step="wait-payment", definition_id="api-purchase", version=1)) == sorted(ids)
    assert found(status=["COMPLETED", "FAILED"]) == []
    assert found(version=2) == []
    assert found(created_before="2000-01-01T00:00:00Z") == []
    assert len(found(created_after="2000-01-01T00:00:00Z")) == 5


def test_a_repeated_signal_with_its_idempotency_key_has_one_effect(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], drain: Callable[..., int]
) -> None:
    deployed()
    run = start(admin_api).json()["run"]
    url = f"/api/v1/runs/{run}/signals/"
    body = {"name": "paid", "payload": {"amount": 3}}
    first = admin_api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="pay-1")
    again = admin_api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="pay-1")
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    drain()
    history = admin_api.get(f"/api/v1/runs/{run}/history/").json()["results"]
    assert [e["type"] for e in history].count("SIGNAL_RECEIVED") == 1


def test_history_pages_by_sequence(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], drain: Callable[..., int]
) -> None:
    deployed()
    run = start(admin_api).json()["run"]
    drain()
    admin_api.post(f"/api/v1/runs/{run}/signals/", {"name": "paid", "payload": {"amount": 3}}, format="json")
    drain()
    everything = admin_api.get(f"/api/v1/runs/{run}/history/").json()["results"]
    seqs: list[int] = []
    url: str | None = f"/api/v1/runs/{run}/history/?page_size=3"
    while url:
        page = admin_api.get(url).json()
        seqs += [e["seq"] for e in page["results"]]
        url = page["next"]
    assert seqs == [e["seq"] for e in everything] == list(range(1, len(everything) + 1))


def test_cancel_answers_the_cancelled_run_and_keeps_the_reason_out_of_errors(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], drain: Callable[..., int]
) -> None:
    deployed()
    run = start(admin_api).json()["run"]
    drain()
    cancelled = admin_api.post(f"/api/v1/runs/{run}/cancel/", {"reason": "customer withdrew"}, format="json")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "CANCELLED"
    assert cancelled.json()["waits"] == []


def test_a_failed_run_is_retried_and_a_run_is_migrated(
    admin_api: APIClient,
    deployed: Callable[..., dict[str, Any]],
    drain: Callable[..., int],
    make_user: Callable[..., Any],
    client_for: Callable[..., APIClient],
) -> None:
    deployed(1)
    run = start(admin_api).json()["run"]
    drain()
    admin_api.post(f"/api/v1/runs/{run}/signals/", {"name": "paid", "payload": {"amount": 3}}, format="json")
    drain()
    approver = client_for(make_user("alice", groups=("approvers",)))
    [task] = approver.get("/api/v1/tasks/").json()["results"]
    approver.post(f"/api/v1/tasks/{task['id']}/complete/", {"decision": "reject"}, format="json")
    drain()
    failed = admin_api.get(f"/api/v1/runs/{run}/").json()
    assert failed["status"] == "FAILED" and failed["failure"]["code"] == "rejected"
    retried = admin_api.post(f"/api/v1/runs/{run}/retry/")
    assert retried.status_code == 202 and retried.json()["kind"] == "RETRY"

    deployed(2, activate=False)
    other = start(admin_api, "PO-2").json()["run"]
    drain()
    migrated = admin_api.post(f"/api/v1/runs/{other}/migrate/", {"target_version": 2}, format="json")
    assert migrated.status_code == 202, migrated.content
    assert migrated.json()["kind"] == "MIGRATION" and migrated.json()["run"] == other


def test_await_answers_the_run_once_the_executor_is_idle(
    admin_api: APIClient, deployed: Callable[..., dict[str, Any]], celery_worker_process: Any
) -> None:
    deployed()
    started = admin_api.post(
        "/api/v1/runs/?await=20",
        {"definition_id": "api-purchase", "payload": {"number": "PO-1", "total": 10}},
        format="json",
    )
    assert started.status_code == 200, started.content
    run = started.json()
    assert run["status"] == "WAITING" and run["current_step"] == "wait-payment"
    signalled = admin_api.post(
        f"/api/v1/runs/{run['id']}/signals/?await=20", {"name": "paid", "payload": {"amount": 7}}, format="json"
    )
    assert signalled.status_code == 200
    assert signalled.json()["current_step"] == "review" and signalled.json()["state"]["paid"] == 7
