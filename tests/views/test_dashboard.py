"""The operations dashboard (/ops/): staff only, counts that match the database, the graph
with runs per position, and a throughput chart of the last hour."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db.models import Count

from tests.engine import conftest as engine_fixtures
from tests.support import ops
from workflows import operations
from workflows.models import Command, Park, Run

deploy = engine_fixtures.deploy  # the engine tests' fixtures: load+publish+activate, in-process executor
drain = engine_fixtures.drain

pytestmark = pytest.mark.django_db(transaction=True)


def tile(html: str, metric: str) -> str:
    match = re.search(rf'data-metric="{metric}"><dt>[^<]*</dt><dd>([^<]*)</dd>', html)
    assert match, f"no {metric} tile"
    return match.group(1)


@pytest.fixture
def mix(deploy: Any, drain: Any) -> dict[str, Any]:
    """Three runs parked at wait-payment, one dead-lettered START, one OUTCOME_UNKNOWN START."""
    deploy(ops.ORDER)
    deploy(ops.EMAILER)
    parked = [operations.start(definition_id="order-signal", payload={"order": f"P-{i}"}).run_id for i in range(3)]
    drain()
    dead = operations.start(definition_id="order-signal", payload={"order": "D-1"}).run_id
    ops.dead_letter_next_command(dead)
    unknown = operations.start(definition_id="emailer", payload={"email": "ops@example.com"}).run_id
    ops.outcome_unknown_next_command(unknown)
    return {"parked": parked, "dead": dead, "unknown": unknown}


def test_signed_out_visitors_are_sent_to_sign_in(client: Any) -> None:
    response = client.get("/ops/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=/ops/")


def test_non_staff_are_refused(client: Any, demo_users: Any) -> None:
    client.force_login(demo_users["alice"])
    assert client.get("/ops/").status_code == 403


def test_queue_health_matches_the_database(client: Any, demo_users: Any, mix: Any) -> None:
    client.force_login(demo_users["admin"])
    html = client.get("/ops/").content.decode()
    by_status = dict(Command.objects.values_list("status").annotate(n=Count("id")))
    assert tile(html, "dead") == str(by_status.get("DEAD", 0)) == "1"
    assert tile(html, "outcome-unknown") == str(by_status.get("OUTCOME_UNKNOWN", 0)) == "1"
    assert tile(html, "claimed") == str(by_status.get("CLAIMED", 0)) == "0"
    assert tile(html, "deferred") == "0"
    assert tile(html, "expired-leases") == "0"
    # the three payment timeouts wait for their fire time: scheduled, not pending
    assert tile(html, "scheduled") == "3" and tile(html, "pending") == "0"
    assert tile(html, "oldest-pending") == "—"


def test_oldest_pending_age_is_read_on_the_database_clock(client: Any, demo_users: Any, deploy: Any) -> None:
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "O-1"}).run_id
    from workflows.engine import db

    db.execute("UPDATE workflow_commands SET available_at = now() - interval '125 seconds' WHERE run_id = %s", [run_id])
    client.force_login(demo_users["admin"])
    html = client.get("/ops/").content.decode()
    assert tile(html, "pending") == "1"
    assert tile(html, "oldest-pending") == "2 min"


def test_runs_by_revision_and_status_match_the_database(client: Any, demo_users: Any, mix: Any) -> None:
    client.force_login(demo_users["admin"])
    html = client.get("/ops/").content.decode()
    for (definition_id, version, status), n in {
        (d, v, s): n
        for d, v, s, n in Run.objects.values_list("definition_id", "version", "status").annotate(n=Count("id"))
    }.items():
        row = re.search(rf'<tr data-revision="{definition_id}:default:{version}">(.*?)</tr>', html, re.S)
        assert row, definition_id
        cell = re.search(rf'data-status="{status}">(?:<a [^>]*>)?(\d+)', row.group(1))
        assert cell and int(cell.group(1)) == n, (definition_id, status)
    order_row = re.search(r'<tr data-revision="order-signal:default:1">(.*?)</tr>', html, re.S)
    assert order_row is not None
    assert re.search(r'data-status="total"><strong>4<', order_row.group(1))


def test_parked_runs_are_counted_per_position_on_the_graph(client: Any, demo_users: Any, mix: Any) -> None:
    client.force_login(demo_users["admin"])
    html = client.get("/ops/").content.decode()
    parked = Park.objects.filter(left_at__isnull=True, definition_id="order-signal", node="wait-payment").count()
    assert parked == 3
    article = re.search(
        r'<article class="card revision" data-revision="order-signal:default:1".*?</article>', html, re.S
    )
    assert article, "no parked section for order-signal v1"
    assert re.search(r'<tr data-position="wait-payment">.*?data-count>3<', article.group(0), re.S)
    # the run viewer's graph, with a badge of 3 on the step
    assert "<svg" in article.group(0) and 'data-step="wait-payment"' in article.group(0)
    node = re.search(r'<g class="[^"]*" data-step="wait-payment".*?</g>', article.group(0), re.S)
    assert node and "3 here" in node.group(0)


def test_throughput_counts_the_commands_settled_this_hour(client: Any, demo_users: Any, mix: Any) -> None:
    client.force_login(demo_users["admin"])
    response = client.get("/ops/")
    settled = Command.objects.filter(settled_at__isnull=False).count()
    assert settled >= 3
    assert response.context["throughput"]["total"] == settled
    html = response.content.decode()
    assert f"{settled} command{'s' if settled != 1 else ''} settled" in html
    assert html.count('<g class="bar">') == 60


def test_the_queue_part_refreshes_alone_through_htmx(client: Any, demo_users: Any, mix: Any) -> None:
    client.force_login(demo_users["admin"])
    response = client.get("/ops/?part=queue", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue-health"') and "<html" not in html
    assert tile(html, "dead") == "1"


def test_the_admin_index_links_to_the_operations_pages(client: Any, demo_users: Any) -> None:
    client.force_login(demo_users["admin"])
    html = client.get("/admin/").content.decode()
    for href, text in (("/ops/", "Dashboard"), ("/ops/radar/", "Radar"), ("/runs/", "Runs"), ("/tasks/", "Inbox")):
        assert f'<a href="{href}">{text}</a>' in html
    assert "Site administration" in html  # the admin's own index is still there
