"""The dashboard's runs by revision at any size (issue #32): runs that are not ended counted
live on every load, ended ones from the snapshot the beat task ``workflows.run_totals``
refreshes, with the time they were counted at on the page.

The story: ``/ops/`` counted every run ever kept on each load, a GROUP BY that took 700 ms at
a million runs (``bench/bigtables.py``) and grew with the history."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from tests.engine import conftest as engine_fixtures
from tests.support import ops
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import db
from workflows.models import Run, RunTotal

deploy = engine_fixtures.deploy
drain = engine_fixtures.drain

pytestmark = pytest.mark.django_db(transaction=True)
ORDER_ROW = "order-signal:default:1"


def count(html: str, status: str, revision: str = ORDER_ROW) -> int:
    """The number in a revision's column for a status (0 when the column is not shown)."""
    row = re.search(rf'<tr data-revision="{revision}">(.*?)</tr>', html, re.S)
    assert row, f"no row for {revision}"
    cell = re.search(rf'data-status="{status}">(?:<a [^>]*>)?(?:<span class="muted">)?(\d+)', row.group(1))
    return int(cell.group(1)) if cell else 0


def counted_at_shown(html: str) -> str:
    match = re.search(r'id="ended-counted-at">Ended runs counted at <time datetime="([^"]+)"', html)
    assert match, "the page does not say when the ended runs were counted"
    return match.group(1)


@pytest.fixture
def page(client: Client, demo_users: Any) -> Any:
    client.force_login(demo_users["admin"])
    return lambda: client.get("/ops/").content.decode()


@pytest.fixture
def order(deploy: Any, drain: Any) -> Any:
    """Start order-signal runs; ``order(n)`` answers their ids (PENDING until drained)."""
    deploy(ops.ORDER)

    def start(n: int) -> list[Any]:
        return [operations.start(definition_id="order-signal", payload={"order": f"O-{i}"}).run_id for i in range(n)]

    return start


def cancel(run_id: Any, drain: Any) -> None:
    operations.cancel(run_id=run_id, reason="not needed")
    drain(run_id)
    assert Run.objects.get(pk=run_id).status == "CANCELLED"


def test_runs_that_are_not_ended_are_counted_live_as_they_start_and_park(page: Any, order: Any, drain: Any) -> None:
    cancel(order(1)[0], drain)
    assert count(page(), "CANCELLED") == 1  # the snapshot of ended runs is stored by now
    started = order(2)
    html = page()
    assert (count(html, "PENDING"), count(html, "WAITING")) == (2, 0)
    drain()
    html = page()
    assert (count(html, "PENDING"), count(html, "WAITING")) == (0, 2)
    cancel(started[0], drain)
    html = page()
    # an ended run leaves its live column at once; its ended column waits for the next count
    assert (count(html, "WAITING"), count(html, "CANCELLED")) == (1, 1)


def test_ended_runs_are_counted_by_the_refresh_task(page: Any, order: Any, drain: Any) -> None:
    ids = order(3)
    drain()
    cancel(ids[0], drain)
    html = page()  # no snapshot yet: the page counts one and stores it
    assert (count(html, "CANCELLED"), count(html, "WAITING")) == (1, 2)
    before = counted_at_shown(html)

    cancel(ids[1], drain)
    html = page()
    assert (count(html, "CANCELLED"), count(html, "WAITING")) == (1, 1)  # the snapshot, as dated
    assert counted_at_shown(html) == before

    tasks.run_totals()
    html = page()
    assert (count(html, "CANCELLED"), count(html, "WAITING")) == (2, 1)
    assert counted_at_shown(html) > before
    assert re.search(r'data-status="total"><strong>3<', html)


def test_the_page_says_when_the_ended_runs_were_counted(page: Any, order: Any, drain: Any) -> None:
    cancel(order(1)[0], drain)
    tasks.run_totals()
    stored = RunTotal.objects.get(definition_id="order-signal", status="CANCELLED")
    assert stored.runs == 1
    html = page()
    assert counted_at_shown(html) == timezone.localtime(stored.counted_at).isoformat()
    assert "runs not ended are counted live." in html


def test_without_a_snapshot_the_page_counts_the_ended_runs_and_keeps_the_count(
    page: Any, order: Any, drain: Any
) -> None:
    ids = order(2)
    drain()
    cancel(ids[0], drain)
    assert not RunTotal.objects.exists()
    html = page()
    assert (count(html, "CANCELLED"), count(html, "WAITING")) == (1, 1)
    assert list(RunTotal.objects.values_list("definition_id", "status", "runs")) == [("order-signal", "CANCELLED", 1)]


def test_a_stored_snapshot_is_kept_by_a_refresh_that_only_wanted_one(order: Any, drain: Any) -> None:
    ids = order(2)
    cancel(ids[0], drain)
    counted = operations.run_totals_refresh()
    cancel(ids[1], drain)
    assert operations.run_totals_refresh(only_if_missing=True) == counted
    assert RunTotal.objects.get(status="CANCELLED").runs == 1
    operations.run_totals_refresh()
    assert RunTotal.objects.get(status="CANCELLED").runs == 2


def test_a_refresh_waits_for_one_in_progress_and_counts_after_it(order: Any, drain: Any) -> None:
    """Two refreshes at once (the beat and a first page load): without the table lock, the
    second one's DELETE passed over the rows the first one was writing and its INSERT then
    collided with them (the unique key) when the first committed."""
    ids = order(2)
    cancel(ids[0], drain)
    stored, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_refresh() -> None:
        try:
            with transaction.atomic():
                operations.run_totals_refresh()
                stored.set()
                release.wait(10)
        except Exception as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    def second_refresh() -> None:
        try:
            operations.run_totals_refresh()
        except Exception as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    holder, waiter = threading.Thread(target=first_refresh), threading.Thread(target=second_refresh)
    holder.start()
    try:
        assert stored.wait(10)
        waiter.start()
        eventually(
            lambda: (
                db.fetchone(
                    "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                    "WHERE c.relname = 'workflow_run_totals' AND NOT l.granted"
                )
                == (1,)
            ),
            timeout=10,
            what="the second refresh to wait for the first",
        )
        cancel(ids[1], drain)  # commits while the first refresh holds its snapshot open
    finally:
        release.set()
        holder.join(10)
        if waiter.ident is not None:
            waiter.join(10)
    assert not holder.is_alive() and not waiter.is_alive()
    assert errors == []
    assert list(RunTotal.objects.values_list("status", "runs")) == [("CANCELLED", 2)]


def test_the_refresh_is_on_the_beat_every_minute(settings: Any) -> None:
    entries = {entry["task"]: entry for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert entries["workflows.run_totals"]["schedule"] == 60.0
    assert tasks.run_totals.name == "workflows.run_totals"


def test_the_counted_at_line_is_german_for_a_german_browser(demo_users: Any, order: Any, drain: Any) -> None:
    cancel(order(1)[0], drain)
    client = Client(HTTP_ACCEPT_LANGUAGE="de-DE,de;q=0.9")
    client.force_login(demo_users["admin"])
    html = client.get("/ops/").content.decode()
    assert re.search(r'id="ended-counted-at">Beendete Läufe gezählt am <time datetime=', html)


@pytest.mark.e2e
def test_a_real_beat_refreshes_the_ended_totals(
    celery_worker_process: CeleryProcesses, page: Any, order: Any, drain: Any, tmp_path: Any
) -> None:
    ids = order(2)
    drain()
    cancel(ids[0], drain)
    assert count(page(), "CANCELLED") == 1
    cancel(ids[1], drain)
    # a beat of its own that sends the refresh every second (the suite's beat: every minute);
    # the suite's worker runs it
    beat = CeleryProcesses({**celery_worker_process.env, "RUN_TOTALS_INTERVAL_SECONDS": "1"}, tmp_path)
    beat.start_beat()
    try:
        eventually(
            lambda: count(page(), "CANCELLED") == 2,
            timeout=30,
            what="the beat's refresh to count the second cancelled run",
            details=lambda: celery_worker_process.logs() + beat.logs(),
        )
    finally:
        beat.stop()
