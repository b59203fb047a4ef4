"""An operator in Chromium: the dashboard's counts match the database after a scripted mix of
runs, the radar lists exactly the stuck ones, its retry recovers the dead-lettered run and its
bulk cancel asks for the count; the metrics endpoint's counters move when commands settle.

The executor runs in-process (``drain``), as tests/engine does. Set ``SWITCHYARD_SCREENSHOTS=1``
to refresh docs/screenshots/dashboard.png and radar.png; otherwise they go to the test's
temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count

from tests.engine import conftest as engine_fixtures
from tests.engine import documents
from tests.support import ops
from tests.support.browser import login
from workflows import operations
from workflows.models import Command, Park, Run

deploy = engine_fixtures.deploy  # the engine tests' fixtures: load+publish+activate, in-process executor
drain = engine_fixtures.drain

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") == "1" else tmp_path


def tile(page: Any, metric: str) -> str:
    return page.locator(f'[data-metric="{metric}"] dd').inner_text()


def section_runs(page: Any, section: str) -> list[str]:
    return page.locator(f"#{section} tbody tr").evaluate_all("rows => rows.map(r => r.dataset.run)")


@pytest.fixture
def scripted_mix(deploy: Any, drain: Any) -> dict[str, Any]:
    deploy(ops.ORDER)
    deploy(ops.EMAILER)
    deploy(documents.APPROVAL)
    parked = [
        operations.start(definition_id="order-signal", payload={"order": f"P-{i}"}, business_key=f"ORDER-{i}").run_id
        for i in range(4)
    ]
    operations.start(definition_id="approval", payload={"number": "A-0", "total": 50})  # completes at once
    overdue = operations.start(definition_id="approval", payload={"number": "A-1", "total": 5000}).run_id
    drain()
    operations.signal(run_id=parked[3], name="paid", payload={"amount": 12.5})  # completes
    drain()
    ops.age_open_park(parked[0], seconds=3 * 3600)  # past the one-hour floor: stuck
    ops.make_overdue(overdue)
    dead = operations.start(definition_id="order-signal", payload={"order": "D-1"}, business_key="ORDER-DEAD").run_id
    ops.dead_letter_next_command(dead)
    unknown = operations.start(definition_id="emailer", payload={"email": "ops@example.com"}).run_id
    ops.outcome_unknown_next_command(unknown)
    return {"parked": parked[:3], "stuck": parked[0], "overdue": overdue, "dead": dead, "unknown": unknown}


def test_operator_sees_the_database_and_fixes_what_is_stuck(
    page: Any, live_server: Any, demo_users: Any, scripted_mix: Any, drain: Any, tmp_path: Path
) -> None:
    mix = scripted_mix
    login(page, live_server, "admin", "admin", next="/admin/")
    page.get_by_role("link", name="Dashboard").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Operations dashboard"

    # queue health, against the database
    by_status = dict(Command.objects.values_list("status").annotate(n=Count("id")))
    assert tile(page, "dead") == str(by_status["DEAD"]) == "1"
    assert tile(page, "outcome-unknown") == str(by_status["OUTCOME_UNKNOWN"]) == "1"
    assert tile(page, "claimed") == str(by_status.get("CLAIMED", 0))
    assert tile(page, "deferred") == str(by_status.get("DEFERRED", 0))
    assert tile(page, "expired-leases") == "0"
    scheduled = Command.objects.filter(status="PENDING").count()
    assert tile(page, "pending") == "0" and tile(page, "scheduled") == str(scheduled)

    # runs by revision and status, every cell
    counts = Run.objects.values_list("definition_id", "version", "status").annotate(n=Count("id"))
    for definition_id, version, status, n in counts:
        row = page.locator(f'tr[data-revision="{definition_id}:default:{version}"]')
        assert row.locator(f'td[data-status="{status}"]').inner_text() == str(n), (definition_id, status)
    assert page.locator('tr[data-revision="order-signal:default:1"] td[data-status="total"]').inner_text() == "5"

    # parked runs by position: the table and the badge on the graph
    revision = page.locator('article[data-revision="order-signal:default:1"]')
    parked_here = Park.objects.filter(left_at__isnull=True, definition_id="order-signal", node="wait-payment").count()
    assert revision.locator('tr[data-position="wait-payment"] td[data-count]').inner_text() == str(parked_here) == "3"
    assert revision.locator('svg g[data-step="wait-payment"] .wfg-badge-text').text_content() == "3"
    assert (
        page.locator(
            'article[data-revision="approval:default:1"] tr[data-position="review"] td[data-count]'
        ).inner_text()
        == "1"
    )
    assert "settled" in page.locator("#throughput-summary").inner_text()
    page.screenshot(path=str(_shots(tmp_path) / "dashboard.png"), full_page=True)

    # the radar: exactly the stuck ones
    page.get_by_role("link", name="Stuck-run radar").click()
    assert section_runs(page, "parked") == [str(mix["stuck"])]
    assert section_runs(page, "stuck") == []
    assert section_runs(page, "dead") == [str(mix["dead"])]
    assert section_runs(page, "unknown") == [str(mix["unknown"])]
    assert section_runs(page, "captures") == []
    assert section_runs(page, "tasks") == [str(mix["overdue"])]
    for run_id in mix["parked"][1:]:
        assert page.locator(f'tr[data-run="{run_id}"]').count() == 0
    assert page.locator("#radar-summary").inner_text() == "4 items need attention."
    page.screenshot(path=str(_shots(tmp_path) / "radar.png"), full_page=True)

    # retry the dead letter from its row; the executor recovers the run
    page.locator("#dead").get_by_role("button", name="Retry").click()
    assert "Retry recorded for run" in page.locator(".messages").inner_text()
    drain()
    run = Run.objects.get(pk=mix["dead"])
    assert run.status == "WAITING" and run.current_step == "wait-payment"
    page.reload()
    assert section_runs(page, "dead") == []
    assert page.locator("#dead").get_by_text("None.").is_visible()

    # bulk cancel of the stuck run: the count of what it touches must be typed back
    page.locator(f'#parked tr[data-run="{mix["stuck"]}"] input[type=checkbox]').check()
    page.get_by_role("button", name="Cancel selected…").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Cancel 1 run?"
    page.get_by_label("Reason").fill("payment never came")
    page.get_by_label("Type 1 to cancel 1 run").fill("2")
    page.get_by_role("button", name="Cancel 1 run").click()
    assert page.get_by_role("alert").inner_text().startswith("Type 1")
    assert Run.objects.get(pk=mix["stuck"]).status == "WAITING"
    page.get_by_label("Type 1 to cancel 1 run").fill("1")
    page.get_by_role("button", name="Cancel 1 run").click()
    assert "Cancelled 1 run." in page.locator(".messages").inner_text()
    assert Run.objects.get(pk=mix["stuck"]).status == "CANCELLED"
    assert section_runs(page, "parked") == []


def test_metrics_counters_move_when_commands_settle(
    page: Any, live_server: Any, settings: Any, deploy: Any, drain: Any
) -> None:
    settings.METRICS_TOKEN = "browser-scrape"
    deploy(ops.ORDER)
    headers = {"Authorization": "Bearer browser-scrape"}
    series = 'switchyard_commands_settled_total{kind="START",outcome="COMPLETE"}'

    def scrape() -> float:
        response = page.request.get(f"{live_server.url}/metrics", headers=headers)
        assert response.status == 200
        line = next(x for x in response.text().splitlines() if x.startswith(series + " "))
        return float(line.rsplit(" ", 1)[1])

    assert page.request.get(f"{live_server.url}/metrics").status == 401
    before = scrape()
    for i in range(2):
        operations.start(definition_id="order-signal", payload={"order": f"M-{i}"})
    drain()
    assert scrape() == before + 2
