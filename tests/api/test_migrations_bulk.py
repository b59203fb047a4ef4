"""The bulk migration API (/api/v1/migrations/): freeze, apply in batches, read the record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.engine.test_migration import REVISION_1, REVISION_2
from workflows import definitions, operations, queries
from workflows.models import Command

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def parked(db: None, drain: Callable[..., int]) -> dict[str, list[str]]:
    for text, activate in ((REVISION_1, True), (REVISION_2, False)):
        ref = definitions.load(scope="default", text=text, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(
                scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
            )
    runs = {
        "review": [
            operations.start(definition_id="purchase-move", payload={"route": "review"}, business_key=f"PO-{i}").run_id
            for i in range(3)
        ],
        "cool-off": [operations.start(definition_id="purchase-move", payload={"route": "cool"}).run_id],
    }
    drain()
    return runs


def body(**rows: Any) -> dict[str, Any]:
    return {"definition_id": "purchase-move", "source_version": 1, "target_version": 2, "rows": list(rows.values())}


def test_freeze_apply_and_read_a_migration(
    parked: dict[str, list[str]],
    make_user: Callable[..., User],
    client_for: Callable[..., APIClient],
    drain: Callable[..., int],
) -> None:
    api = client_for(make_user("mover", "workflows.migrate_runs"))
    picked = parked["review"][:2]
    frozen = api.post(
        "/api/v1/migrations/",
        {
            **body(
                review={
                    "node": "review",
                    "kind": "TASK",
                    "action": "move",
                    "target_node": "manager-review",
                    "runs": picked,
                },
                cool={"node": "cool-off", "kind": "TIMER", "action": "end", "runs": "all"},
            ),
            "reason": "reviews go to managers",
        },
        format="json",
    )
    assert frozen.status_code == 201, frozen.content
    record = frozen.json()
    assert (record["status"], record["total"], record["created_by"]) == ("PREVIEWED", 3, "mover")
    assert record["preview"][0]["target"]["assignment"] == {"mode": "user", "value": "bob"}
    assert not Command.objects.filter(kind="MIGRATION").exists()

    applied = api.post(f"/api/v1/migrations/{record['id']}/apply/", {}, format="json")
    # the two moves are made by Apply itself; the end runs as a MIGRATION command
    assert applied.status_code == 200 and (applied.json()["in_flight"], applied.json()["left"]) == (1, 0)
    drain()
    read = api.get(f"/api/v1/migrations/{record['id']}/").json()
    assert (read["status"], read["counts"]) == ("DONE", {"MOVED": 2, "ENDED": 1})
    runs = api.get(f"/api/v1/migrations/{record['id']}/runs/?status=MOVED").json()["results"]
    assert sorted(r["run"] for r in runs) == sorted(picked)
    listed = api.get("/api/v1/migrations/?definition_id=purchase-move").json()["results"]
    assert [r["id"] for r in listed] == [record["id"]]
    assert queries.tasks_for(User.objects.create_user("bob")).count() == 2


def test_nothing_selected_changes_nothing(
    parked: dict[str, list[str]], make_user: Callable[..., User], client_for: Callable[..., APIClient]
) -> None:
    api = client_for(make_user("mover", "workflows.change_definitionversion"))
    answer = api.post(
        "/api/v1/migrations/",
        body(review={"node": "review", "kind": "TASK", "action": "end", "runs": []}),
        format="json",
    )
    assert answer.status_code == 200 and answer.json()["id"] is None


def test_callers_without_the_permission_are_refused(
    parked: dict[str, list[str]], make_user: Callable[..., User], client_for: Callable[..., APIClient]
) -> None:
    api = client_for(make_user("starter", "workflows.add_run", "workflows.change_run"))
    answer = api.post(
        "/api/v1/migrations/",
        body(review={"node": "review", "kind": "TASK", "action": "end", "runs": "all"}),
        format="json",
    )
    assert answer.status_code == 403 and answer.json()["code"] == "PERMISSION_DENIED"
    assert api.get("/api/v1/migrations/").status_code == 403


def test_bad_input_is_refused_value_free(
    parked: dict[str, list[str]], make_user: Callable[..., User], client_for: Callable[..., APIClient]
) -> None:
    api = client_for(make_user("mover", "workflows.migrate_runs"))
    answer = api.post(
        "/api/v1/migrations/",
        body(
            review={"node": "review", "kind": "TASK", "action": "move", "target_node": "LEAK-SENTINEL", "runs": "all"}
        ),
        format="json",
    )
    assert answer.status_code == 400 and "LEAK-SENTINEL" not in answer.content.decode()
    assert answer.json()["violations"][0]["pointer"] == "/rows/0/target_node"
    assert api.get("/api/v1/migrations/999999/").status_code == 404


REVIEW_ALL = {"node": "review", "kind": "TASK", "action": "move", "target_node": "manager-review", "runs": "all"}


def test_background_apply_pause_resume_and_close_through_the_api(
    parked: dict[str, list[str]],
    make_user: Callable[..., User],
    client_for: Callable[..., APIClient],
) -> None:
    api = client_for(make_user("mover", "workflows.migrate_runs"))
    record_id = api.post("/api/v1/migrations/", body(review=REVIEW_ALL), format="json").json()["id"]

    started = api.post(f"/api/v1/migrations/{record_id}/apply/", {"background": True}, format="json")
    assert started.status_code == 200, started.content
    data = started.json()
    assert (data["status"], data["background"], data["left"], data["settled"], data["percent"]) == (
        "APPLYING",
        True,
        3,
        0,
        0,
    )
    paused = api.post(f"/api/v1/migrations/{record_id}/pause/", format="json")
    assert paused.status_code == 200 and (paused.json()["status"], paused.json()["paused_by"]) == ("PAUSED", "mover")
    assert operations.migration_run_background(record_id=record_id, budget_seconds=5) == "held"  # nothing applied

    again = api.post(f"/api/v1/migrations/{record_id}/pause/", format="json")
    assert again.status_code == 409 and again["Content-Type"].startswith("application/problem+json")
    assert again.json()["code"] == "MIGRATION_ILLEGAL_STATE"

    no_reason = api.post(f"/api/v1/migrations/{record_id}/close/", {"reason": " "}, format="json")
    assert no_reason.status_code == 400 and no_reason.json()["violations"][0]["pointer"] == "/reason"
    assert api.get(f"/api/v1/migrations/{record_id}/").json()["status"] == "PAUSED"  # nothing changed

    resumed = api.post(f"/api/v1/migrations/{record_id}/resume/", format="json")
    assert resumed.status_code == 200 and resumed.json()["status"] == "APPLYING"
    closed = api.post(f"/api/v1/migrations/{record_id}/close/", {"reason": "the target is wrong"}, format="json")
    assert closed.status_code == 200, closed.content
    data = closed.json()
    assert (data["status"], data["closed_by"], data["close_reason"]) == ("CLOSED", "mover", "the target is wrong")
    assert data["counts"] == {"NOT_APPLIED": 3} and data["left"] == 0
    runs = api.get(f"/api/v1/migrations/{record_id}/runs/?status=NOT_APPLIED").json()["results"]
    assert len(runs) == 3 and {r["detail"] for r in runs} == {"CLOSED"}


def test_the_api_refuses_to_freeze_runs_of_an_open_migration(
    parked: dict[str, list[str]],
    make_user: Callable[..., User],
    client_for: Callable[..., APIClient],
) -> None:
    api = client_for(make_user("mover", "workflows.migrate_runs"))
    first = api.post("/api/v1/migrations/", body(review=REVIEW_ALL), format="json").json()["id"]
    second = api.post("/api/v1/migrations/", body(review=REVIEW_ALL), format="json")
    assert second.status_code == 409 and second["Content-Type"].startswith("application/problem+json")
    problem = second.json()
    assert problem["code"] == "RUNS_IN_OPEN_MIGRATION"
    assert f"already in migration {first}" in problem["detail"] and "PO-" not in problem["detail"]


def test_only_migrators_may_pause_resume_or_close(
    parked: dict[str, list[str]],
    make_user: Callable[..., User],
    client_for: Callable[..., APIClient],
) -> None:
    api = client_for(make_user("mover", "workflows.migrate_runs"))
    record_id = api.post("/api/v1/migrations/", body(review=REVIEW_ALL), format="json").json()["id"]
    api.post(f"/api/v1/migrations/{record_id}/apply/", {"background": True}, format="json")
    reader = client_for(make_user("reader", "workflows.view_run"))
    for action, payload in (("pause", {}), ("resume", {}), ("close", {"reason": "x"})):
        refused = reader.post(f"/api/v1/migrations/{record_id}/{action}/", payload, format="json")
        assert refused.status_code == 403, action
    assert api.get(f"/api/v1/migrations/{record_id}/").json()["status"] == "APPLYING"


def test_notify_digest_is_an_optional_boolean_kept_on_the_record(
    parked: dict[str, list[str]], make_user: Callable[..., User], client_for: Callable[..., APIClient]
) -> None:
    api = client_for(make_user("mover", "workflows.migrate_runs"))
    review = {"node": "review", "kind": "TASK", "action": "end", "runs": parked["review"][:1]}
    plain = api.post("/api/v1/migrations/", body(review=review), format="json")
    assert plain.status_code == 201 and plain.json()["notify_digest"] is False  # the setting's default
    asked = api.post(
        "/api/v1/migrations/",
        {**body(review={**review, "runs": parked["review"][1:2]}), "notify_digest": True},
        format="json",
    )
    assert asked.status_code == 201 and asked.json()["notify_digest"] is True
    assert api.get(f"/api/v1/migrations/{asked.json()['id']}/").json()["notify_digest"] is True
    bad = api.post("/api/v1/migrations/", {**body(review=review), "notify_digest": "LEAK-SENTINEL"}, format="json")
    assert bad.status_code == 400 and "LEAK-SENTINEL" not in bad.content.decode()
    assert bad.json()["violations"][0]["pointer"] == "/notify_digest"
