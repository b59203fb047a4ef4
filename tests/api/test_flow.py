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
