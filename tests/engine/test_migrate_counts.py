"""Issue #26, item 15: the Migrate counts ("Migrate (N parked)", the dialog's positions, the
picker, the dashboard) leave FAILED runs out: a failed run keeps the park of the wait it
failed in, but its migration is rejected, so it is not a run the dialog can move."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.support.ops import make_due
from workflows import operations, queries
from workflows.models import Run

# Runs routed to `clock` fail when its timer fires (the decision after it cannot be
# evaluated) and keep the park of that wait; the others wait for `go`.
FAILING_TIMER = """
definitionId: failing-timer
definitionVersion: 1
contract: {name: failing-timer.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: route
steps:
  - id: route
    type: decision
    routes: [{when: "state.route == 'clock'", to: clock}]
    default: wait-go
  - {id: clock, type: timer, after: PT1H, next: broken}
  - id: broken
    type: decision
    routes: [{when: "state.missing.deeper > 1", to: done}]
    default: done
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


@pytest.mark.django_db(transaction=True)
def test_migrate_counts_leave_out_failed_runs_which_cannot_be_moved(
    deploy: Any, drain: Any, demo_users: dict[str, Any]
) -> None:
    # Issue #26 (item 15): "Migrate (N parked)" counted FAILED runs, whose migration is rejected.
    deploy(FAILING_TIMER)
    clocks = [operations.start(definition_id="failing-timer", payload={"route": "clock"}).run_id for _ in range(2)]
    operations.start(definition_id="failing-timer", payload={"route": "go"})
    drain()
    make_due(clocks[0], "FIRE")
    drain()
    assert Run.objects.get(pk=clocks[0]).status == "FAILED"

    assert queries.parked_by_definition(definition_ids=["failing-timer"]) == {("failing-timer", "default"): 2}
    assert queries.parked_by_version(definition_id="failing-timer") == {("default", 1): 2}
    positions = queries.migration_positions(scope="default", definition_id="failing-timer", version=1)
    assert [(p.node, p.kind, p.runs) for p in positions] == [("clock", "TIMER", 1), ("wait-go", "SIGNAL", 1)]
    by_revision = queries.migration_positions_by_revision(scope="default", definition_id="failing-timer")
    assert [(p.node, p.runs) for p in by_revision[1]] == [("clock", 1), ("wait-go", 1)]
    rows, total = queries.runs_at_position(
        scope="default", definition_id="failing-timer", version=1, node="clock", kind="TIMER"
    )
    assert [str(r["id"]) for r in rows] == [clocks[1]] and total == 1
    assert {(r["node"], r["runs"]) for r in queries.parked_by_position()} == {("clock", 1), ("wait-go", 1)}

    client = Client()
    client.force_login(demo_users["admin"])
    page = client.get("/admin/workflows/definitionversion/").content.decode()
    assert "Migrate (2 parked)" in page and "Migrate (3 parked)" not in page
