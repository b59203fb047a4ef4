"""An operator in Chromium: the dashboard's counts match the database after a scripted mix of
runs, the radar lists exactly the stuck ones, its retry recovers the dead-lettered run and its
bulk cancel asks for the count; the metrics endpoint's counters move when commands settle.

Every number the pages show is compared with a query of the tables (not with a number written
here): a count the dashboard gets wrong fails the test whatever the mix looks like.

The executor runs in-process (``drain``), as tests/engine does. Set ``SWITCHYARD_SCREENSHOTS=1``
to refresh docs/screenshots/dashboard.png and radar.png; otherwise they go to the test's
temporary folder.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count, Min
from prometheus_client.parser import text_string_to_metric_families

from tests.engine import conftest as engine_fixtures
from tests.engine import documents
from tests.support import ops
from tests.support.browser import login
from workflows import conf, operations
from workflows.engine import db, executor
from workflows.models import Command, Park, Run, Task
from workflows.views.dashboard import duration

deploy = engine_fixtures.deploy  # the engine tests' fixtures: load+publish+activate, in-process executor
drain = engine_fixtures.drain

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
QUEUE_TILES = {
    "pending",
    "oldest-pending",
    "scheduled",
    "deferred",
    "claimed",
    "expired-leases",
    "dead",
    "outcome-unknown",
}


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") == "1" else tmp_path


def db_now() -> datetime:
    row = db.fetchone("SELECT now()")
    assert row is not None
    return row[0]


def section_runs(page: Any, section: str) -> list[str]:
    return page.locator(f"#{section} tbody tr").evaluate_all("rows => rows.map(r => r.dataset.run)")


def section_commands(page: Any, section: str) -> list[str]:
    return page.locator(f"#{section} tbody tr").evaluate_all("rows => rows.map(r => r.dataset.command)")


def ages(since: datetime, before: datetime, after: datetime) -> set[str]:
    """What the page may show for an age measured at page load, some instant in [before, after]."""
    low, high = int((before - since).total_seconds()), int((after - since).total_seconds())
    return {duration(s) for s in range(low, high + 1)}


# --- the dashboard, read as the operator sees it -------------------------------------------


def queue_on_page(page: Any) -> dict[str, Any]:
    """The queue-health part in one read (htmx swaps it every 15 s: never mix two versions)."""
    return page.locator("#queue-health").evaluate(
        """q => ({
            clock: q.querySelector('time').getAttribute('datetime'),
            tiles: Object.fromEntries([...q.querySelectorAll('[data-metric]')]
                .map(t => [t.dataset.metric, t.querySelector('dd').innerText.trim()])),
            // the busiest minute is a <time> in the reader's zone: its absolute time, and the
            // line with the time's text as {time}
            busiest: (q.querySelector('#throughput-summary time') || {getAttribute: () => null})
                .getAttribute('datetime'),
            summary: (() => {
                const p = q.querySelector('#throughput-summary'), t = p.querySelector('time');
                return t ? p.innerText.replace(t.innerText, '{time}').trim() : p.innerText.trim();
            })(),
            chart: q.querySelector('svg.throughput > title').textContent,
        })"""
    )


def runs_table_on_page(page: Any) -> dict[str, dict[str, str]]:
    return page.locator("#runs-by-revision tbody tr").evaluate_all(
        """rows => Object.fromEntries(rows.map(r => [r.dataset.revision, Object.fromEntries(
            [...r.querySelectorAll('td[data-status]')].map(c => [c.dataset.status, c.innerText.trim()]))]))"""
    )


def parked_on_page(page: Any) -> dict[str, dict[str, Any]]:
    """Per revision card: its heading, its positions table and the badge on every graph node."""
    return page.locator("article.revision").evaluate_all(
        """cards => Object.fromEntries(cards.map(a => [a.dataset.revision, {
            heading: a.querySelector('h3').innerText.trim(),
            rows: [...a.querySelectorAll('tr[data-position]')].map(r => ({
                node: r.dataset.position,
                kind: r.cells[1].dataset.kind.toLowerCase(),  // the code; the cell shows its label
                label: r.cells[1].innerText.trim(),
                runs: r.querySelector('td[data-count]').innerText.trim(),
                oldest: r.cells[3].innerText.trim(),
            })),
            badges: Object.fromEntries([...a.querySelectorAll('svg g[data-step]')].map(g => {
                const badge = g.querySelector('.wfg-badge-text');
                return [g.dataset.step, badge ? badge.textContent : null];
            })),
        }]))"""
    )


def assert_queue_matches_database(page: Any, *, before: datetime) -> None:
    """Every tile and the throughput line, against the commands table at the page's database
    clock (which must lie between the reads before and after the page was loaded)."""
    shown = queue_on_page(page)
    after = db_now()
    clock = datetime.fromisoformat(shown["clock"])
    assert before <= clock <= after
    assert set(shown["tiles"]) == QUEUE_TILES, "a tile this test does not compare with the database"

    pending = Command.objects.filter(status="PENDING")
    due = pending.filter(available_at__lte=clock)
    expected = {
        "pending": due.count(),
        "scheduled": pending.filter(available_at__gt=clock).count(),
        "deferred": Command.objects.filter(status="DEFERRED").count(),
        "claimed": Command.objects.filter(status="CLAIMED").count(),
        "expired-leases": Command.objects.filter(status="CLAIMED", lease_until__lt=clock).count(),
        "dead": Command.objects.filter(status="DEAD").count(),
        "outcome-unknown": Command.objects.filter(status="OUTCOME_UNKNOWN").count(),
    }
    assert {k: v for k, v in shown["tiles"].items() if k != "oldest-pending"} == {
        k: str(v) for k, v in expected.items()
    }
    oldest = due.aggregate(at=Min("available_at"))["at"]
    if oldest is None:
        assert shown["tiles"]["oldest-pending"] == "—"
    else:
        assert shown["tiles"]["oldest-pending"] in ages(oldest, before, after), (shown["tiles"], oldest)

    # throughput: commands settled in the minutes the chart shows (this one and the 59 before)
    window = clock.replace(second=0, microsecond=0) - timedelta(minutes=59)
    settled = Command.objects.filter(settled_at__gte=window)
    per_minute = Counter(
        at.replace(second=0, microsecond=0) for at in settled.values_list("settled_at", flat=True) if at is not None
    )
    total, failed = settled.count(), settled.filter(status="FAILED").count()
    line = f"{total} command{'s' if total != 1 else ''} settled"
    if failed:
        line += f", {failed} failed"
    if per_minute:
        peak = max(per_minute.values())
        busiest = min(m for m, n in per_minute.items() if n == peak)  # the earliest of equally busy minutes
        line += f"; busiest minute {{time}} with {peak}"
        assert datetime.fromisoformat(shown["busiest"]) == busiest
    assert shown["summary"] == line + "."
    assert shown["chart"].startswith(f"{total} commands settled in the last 60 minutes;")


def assert_runs_match_database(page: Any) -> None:
    """Every cell of the runs table (zeros included) and every total, per revision."""
    in_db: dict[str, dict[str, int]] = {}
    for definition_id, scope, version, status, n in Run.objects.values_list(
        "definition_id", "scope", "version", "status"
    ).annotate(n=Count("id")):
        in_db.setdefault(f"{definition_id}:{scope}:{version}", {})[status] = n
    shown = runs_table_on_page(page)
    assert set(shown) == set(in_db)
    for revision, cells in shown.items():
        statuses = set(cells) - {"total"}
        assert set(in_db[revision]) <= statuses, (revision, "a status with runs has no column")
        assert cells == {
            **{s: str(in_db[revision].get(s, 0)) for s in statuses},
            "total": str(sum(in_db[revision].values())),
        }, revision


def assert_parked_match_database(page: Any, *, before: datetime) -> None:
    """Every position of every revision: the table (count, kind, longest wait), the card's
    total and the badge on every node of its graph (none where nobody waits)."""
    shown = parked_on_page(page)
    after = db_now()
    open_parks = (
        Park.objects.filter(left_at__isnull=True, branch_id="")
        .values_list("definition_id", "scope", "version", "node", "kind")
        .annotate(n=Count("id"), since=Min("since"))
    )
    in_db: dict[str, list[tuple[str, str, int, datetime]]] = {}
    for definition_id, scope, version, node, kind, n, since in open_parks:
        in_db.setdefault(f"{definition_id}:{scope}:{version}", []).append((node, kind, n, since))
    assert set(shown) == set(in_db)
    for revision, positions in in_db.items():
        card = shown[revision]
        rows = {(r["node"], r["kind"]): r for r in card["rows"]}
        assert set(rows) == {(node, kind.lower()) for node, kind, _, _ in positions}, revision
        for node, kind, n, since in positions:
            row = rows[(node, kind.lower())]
            assert row["label"].lower() == kind.lower(), (revision, node)  # English: the kind in words
            assert row["runs"] == str(n), (revision, node)
            assert row["oldest"] in ages(since, before, after), (revision, node, row["oldest"])
        parked = sum(n for _, _, n, _ in positions)
        assert card["heading"].endswith(f"— {parked} run{'s' if parked != 1 else ''} parked"), card["heading"]
        per_node = Counter[str]()
        for node, _, n, _ in positions:
            per_node[node] += n
        assert set(per_node) <= set(card["badges"]), (revision, "a position is missing from the graph")
        assert card["badges"] == {step: str(per_node[step]) if step in per_node else None for step in card["badges"]}


# --- the scripted mix -----------------------------------------------------------------------


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
    # a claim whose executor stopped a moment ago: an expired lease the sweep has not returned yet
    lapsed = operations.start(definition_id="order-signal", payload={"order": "L-1"}).run_id
    head = executor.peek(10, lapsed)[0]
    assert executor.claim(head, lease_seconds=30, max_attempts=conf.get().EXECUTOR.MAX_ATTEMPTS)
    db.execute("UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE id = %s", [head.id])
    # a start no worker took, due for longer than STUCK_AFTER_SECONDS
    stale = operations.start(definition_id="order-signal", payload={"order": "S-1"}, business_key="ORDER-STALE").run_id
    backdate = conf.get().EXECUTOR.STUCK_AFTER_SECONDS + 7 * 60
    db.execute(
        "UPDATE workflow_commands SET recorded_at = now() - make_interval(secs => %s), "
        "available_at = now() - make_interval(secs => %s) WHERE run_id = %s",
        [backdate, backdate, stale],
    )
    stale_command = Command.objects.get(run_id=stale, status="PENDING").pk
    return {
        "parked": parked[:3],
        "stuck": parked[0],
        "overdue": overdue,
        "dead": dead,
        "unknown": unknown,
        "lapsed": lapsed,
        "stale": stale,
        "stale_command": stale_command,
    }


def test_operator_sees_the_database_and_fixes_what_is_stuck(
    page: Any, live_server: Any, demo_users: Any, scripted_mix: Any, drain: Any, tmp_path: Path
) -> None:
    mix = scripted_mix
    login(page, live_server, "admin", "admin", next="/admin/")
    before = db_now()
    page.get_by_role("link", name="Dashboard").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Operations dashboard"

    # the mix really has something in every tile that can go wrong
    in_db = dict(Command.objects.values_list("status").annotate(n=Count("id")))
    assert in_db["DEAD"] and in_db["OUTCOME_UNKNOWN"] and in_db["CLAIMED"] and in_db["PENDING"]
    assert_queue_matches_database(page, before=before)
    assert_runs_match_database(page)
    assert_parked_match_database(page, before=before)
    # a task wait is parked once per open task
    review = Park.objects.filter(left_at__isnull=True, kind="TASK").values_list("definition_id", "node").get()
    assert Task.objects.filter(status="OPEN", run__definition_id=review[0], step=review[1]).count() == 1
    page.screenshot(path=str(_shots(tmp_path) / "dashboard.png"), full_page=True)

    # the radar: exactly the stuck ones
    page.get_by_role("link", name="Stuck-run radar").click()
    expected = {
        "parked": [str(mix["stuck"])],
        "stuck": [str(mix["stale"])],
        "dead": [str(mix["dead"])],
        "unknown": [str(mix["unknown"])],
        "captures": [],
        "tasks": [str(mix["overdue"])],
    }
    assert {section: section_runs(page, section) for section in expected} == expected
    assert section_commands(page, "stuck") == [str(mix["stale_command"])]
    assert "Not claimed: are the workers up?" in page.locator(f'#stuck tr[data-run="{mix["stale"]}"]').inner_text()
    for run_id in [*mix["parked"][1:], mix["lapsed"]]:
        assert page.locator(f'tr[data-run="{run_id}"]').count() == 0
    total = sum(len(runs) for runs in expected.values())
    assert page.locator("#radar-summary").inner_text() == f"{total} items need attention."
    page.screenshot(path=str(_shots(tmp_path) / "radar.png"), full_page=True)

    # retry the dead letter from its row; the executor recovers the run
    page.locator("#dead").get_by_role("button", name="Retry").click()
    assert "Retry recorded for run" in page.locator(".messages").inner_text()
    drain(mix["dead"])
    run = Run.objects.get(pk=mix["dead"])
    assert run.status == "WAITING" and run.current_step == "wait-payment"
    assert not Command.objects.filter(status="DEAD").exists()
    page.reload()
    assert section_runs(page, "dead") == []
    assert page.locator("#dead").get_by_text("None.").is_visible()
    assert section_runs(page, "stuck") == [str(mix["stale"])]  # the retry touched nothing else
    # what the operator sees of the run: the run viewer and the dashboard
    page.goto(f"/runs/{mix['dead']}/")
    assert page.locator("#run-status").inner_text() == run.get_status_display() == "Waiting"
    assert "at wait-payment" in page.locator("dt:text-is('Status') + dd").inner_text()
    before = db_now()
    page.goto("/ops/")
    assert_queue_matches_database(page, before=before)
    assert page.locator('[data-metric="dead"] dd').inner_text() == "0"
    assert_runs_match_database(page)

    # bulk cancel of the stuck run: the count of what it touches must be typed back
    page.goto("/ops/radar/")
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


# --- /metrics ---------------------------------------------------------------------------------


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def settled_counts() -> Counter[tuple[str, str]]:
    """Settled commands in the database by (kind, status)."""
    rows = Command.objects.filter(settled_at__isnull=False).values_list("kind", "status").annotate(n=Count("id"))
    return Counter({(kind, status): n for kind, status, n in rows})


def test_metrics_counters_move_when_commands_settle(
    page: Any, live_server: Any, settings: Any, deploy: Any, drain: Any
) -> None:
    settings.METRICS_TOKEN = "browser-scrape"
    deploy(ops.ORDER)
    headers = {"Authorization": "Bearer browser-scrape"}

    refused = page.goto("/metrics")
    assert refused is not None and refused.status == 401
    assert "metrics need a bearer token" in page.locator("body").inner_text()
    page.set_extra_http_headers(headers)

    def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """The endpoint loaded in the page, read from what the page shows."""
        response = page.goto("/metrics")
        assert response is not None and response.status == 200
        return samples(page.locator("body").inner_text())

    def settled(metrics: dict[Any, float], kind: str, outcome: str) -> float:
        return metrics[("switchyard_commands_settled_total", frozenset({"kind": kind, "outcome": outcome}.items()))]

    def gauge(metrics: dict[Any, float], name: str, **labels: str) -> float:
        return metrics[(name, frozenset(labels.items()))]

    def settled_moved(first: dict[Any, float], then: dict[Any, float]) -> Counter[tuple[str, str]]:
        moved = Counter[tuple[str, str]]()
        for (name, labels), value in then.items():
            if name == "switchyard_commands_settled_total" and value != first[(name, labels)]:
                label = dict(labels)
                moved[(label["kind"], label["outcome"])] = int(value - first[(name, labels)])
        return moved

    def assert_queue_depth_is_the_database(metrics: dict[Any, float]) -> None:
        pending = Command.objects.filter(status="PENDING")
        due = pending.filter(available_at__lte=db_now()).count()
        assert gauge(metrics, "switchyard_queue_depth", status="PENDING") == due
        assert gauge(metrics, "switchyard_queue_depth", status="SCHEDULED") == pending.count() - due
        for status in ("DEFERRED", "CLAIMED", "PARKED"):
            in_db = Command.objects.filter(status=status).count()
            assert gauge(metrics, "switchyard_queue_depth", status=status) == in_db, status
        assert gauge(metrics, "switchyard_dead_letters") == Command.objects.filter(status="DEAD").count()

    first, settled_before = scrape(), settled_counts()
    assert_queue_depth_is_the_database(first)

    started = [operations.start(definition_id="order-signal", payload={"order": f"M-{i}"}).run_id for i in range(2)]
    recorded = scrape()
    assert gauge(recorded, "switchyard_queue_depth", status="PENDING") == 2
    assert_queue_depth_is_the_database(recorded)
    assert settled_moved(first, recorded) == Counter()  # recorded is not settled

    drain()
    ran, settled_ran = scrape(), settled_counts()
    assert settled(ran, "START", "COMPLETE") == settled(first, "START", "COMPLETE") + 2
    assert settled_moved(first, ran) == settled_counts() - settled_before
    assert_queue_depth_is_the_database(ran)
    parked_here = Park.objects.filter(left_at__isnull=True, node="wait-payment").count()
    assert (
        gauge(
            ran,
            "switchyard_parked_runs",
            definition_id="order-signal",
            scope="default",
            version="1",
            position="wait-payment",
        )
        == parked_here
        == 2
    )
    assert gauge(ran, "switchyard_runs", status="WAITING") == Run.objects.filter(status="WAITING").count()

    operations.signal(run_id=started[0], name="paid", payload={"amount": 3.0})
    drain()
    signalled, settled_signalled = scrape(), settled_counts()
    assert settled(signalled, "SIGNAL", "COMPLETE") == settled(ran, "SIGNAL", "COMPLETE") + 1
    # the wait's timeout timer is disarmed: its TIMER command settles too, and is counted
    assert (
        settled_moved(ran, signalled)
        == settled_counts() - settled_ran
        == Counter({("SIGNAL", "COMPLETE"): 1, ("TIMER", "CANCELLED"): 1})
    )
    assert_queue_depth_is_the_database(signalled)

    # a dead-lettering: its settle, the lease expiries that led to it and the dead-letter gauge
    assert gauge(signalled, "switchyard_dead_letters") == 0
    dead = operations.start(definition_id="order-signal", payload={"order": "M-DEAD"}).run_id
    ops.dead_letter_next_command(dead)
    dead_lettered = scrape()
    assert settled(dead_lettered, "START", "DEAD") == settled(signalled, "START", "DEAD") + 1
    assert (
        settled_moved(signalled, dead_lettered)
        == settled_counts() - settled_signalled
        == Counter({("START", "DEAD"): 1})
    )
    expiries = ("switchyard_lease_expiries_total", frozenset({"kind": "START"}.items()))
    assert dead_lettered[expiries] == signalled[expiries] + conf.get().EXECUTOR.MAX_ATTEMPTS
    assert gauge(dead_lettered, "switchyard_dead_letters") == Command.objects.filter(status="DEAD").count() == 1
    assert_queue_depth_is_the_database(dead_lettered)

    # a scraper outside the browser reads the same counters
    response = page.request.get(f"{live_server.url}/metrics", headers=headers)
    assert response.status == 200
    assert settled_moved(dead_lettered, samples(response.text())) == Counter()
