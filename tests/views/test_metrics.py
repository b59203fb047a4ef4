"""/metrics: Prometheus text behind a bearer token; counters fed by the executor's observers
move when commands settle; gauges read from the database at scrape time."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.engine import conftest as engine_fixtures
from tests.support import ops
from workflows import operations
from workflows.engine import executor

deploy = engine_fixtures.deploy  # the engine tests' fixtures: load+publish+activate, in-process executor
drain = engine_fixtures.drain

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "s3cret-scrape-token"


@pytest.fixture
def scrape(client: Any, settings: Any) -> Any:
    settings.METRICS_TOKEN = TOKEN

    def _scrape() -> dict[str, float]:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=")
        samples: dict[str, float] = {}
        for line in response.content.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    return _scrape


def test_not_found_without_a_configured_token(client: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


def test_a_missing_token_is_401_and_a_wrong_one_403(client: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    missing = client.get("/metrics")
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 403 and TOKEN not in wrong.content.decode()


def test_settle_counters_move_when_commands_settle(scrape: Any, deploy: Any, drain: Any) -> None:
    deploy(ops.ORDER)
    start = 'switchyard_commands_settled_total{kind="START",outcome="COMPLETE"}'
    signal = 'switchyard_commands_settled_total{kind="SIGNAL",outcome="COMPLETE"}'
    before = scrape()
    assert start in before and signal in before  # present at zero before anything settled
    run_id = operations.start(definition_id="order-signal", payload={"order": "M-1"}).run_id
    drain()
    middle = scrape()
    assert middle[start] == before[start] + 1
    assert middle['switchyard_segment_duration_seconds_count{kind="START"}'] == (
        before.get('switchyard_segment_duration_seconds_count{kind="START"}', 0) + 1
    )
    operations.signal(run_id=run_id, name="paid", payload={"amount": 5})
    drain()
    assert scrape()[signal] == middle[signal] + 1


def test_dead_letters_lease_expiries_and_deferrals_are_counted(scrape: Any, deploy: Any, drain: Any) -> None:
    from workflows import conf

    deploy(ops.ORDER)
    before = scrape()
    run_id = operations.start(definition_id="order-signal", payload={"order": "M-2"}).run_id
    ops.dead_letter_next_command(run_id)
    after = scrape()
    attempts = conf.get().EXECUTOR.MAX_ATTEMPTS
    assert after['switchyard_lease_expiries_total{kind="START"}'] == (
        before['switchyard_lease_expiries_total{kind="START"}'] + attempts
    )
    assert after['switchyard_commands_settled_total{kind="START",outcome="DEAD"}'] == (
        before['switchyard_commands_settled_total{kind="START",outcome="DEAD"}'] + 1
    )
    assert after["switchyard_dead_letters"] == 1
    # a node without the pinned revision defers the command
    other = operations.start(definition_id="order-signal", payload={"order": "M-3"}).run_id
    from workflows.engine import db

    db.execute("UPDATE workflow_runs SET plan_hash = 'f' || substr(plan_hash, 2) WHERE id = %s", [other])
    executor.drain(run_id=other, budget_seconds=5)
    assert scrape()['switchyard_command_deferrals_total{kind="START"}'] == (
        before['switchyard_command_deferrals_total{kind="START"}'] + 1
    )


def test_gauges_read_the_database_at_scrape_time(scrape: Any, deploy: Any, drain: Any) -> None:
    from tests.engine import documents

    deploy(ops.ORDER)
    deploy(ops.EMAILER)
    deploy(documents.APPROVAL)
    for i in range(2):
        operations.start(definition_id="order-signal", payload={"order": f"G-{i}"})
    approval = operations.start(definition_id="approval", payload={"number": "A-1", "total": 5000}).run_id
    drain()
    ops.make_overdue(approval)
    unknown = operations.start(definition_id="emailer", payload={"email": "ops@example.com"}).run_id
    ops.outcome_unknown_next_command(unknown)
    operations.start(definition_id="order-signal", payload={"order": "G-9"})  # recorded, not yet run
    samples = scrape()
    assert samples["switchyard_metrics_database_up"] == 1
    assert samples['switchyard_queue_depth{status="PENDING"}'] == 1
    assert samples['switchyard_queue_depth{status="SCHEDULED"}'] == 2  # the payment timeouts
    assert samples["switchyard_outcome_unknown_commands"] == 1
    assert samples["switchyard_dead_letters"] == 0
    assert samples["switchyard_open_tasks"] == 1 and samples["switchyard_overdue_tasks"] == 1
    assert samples['switchyard_runs{status="WAITING"}'] == 3
    assert samples['switchyard_runs{status="PENDING"}'] == 2
    assert (
        samples[
            'switchyard_parked_runs{definition_id="order-signal",position="wait-payment",scope="default",version="1"}'
        ]
        == 2
    )
    review = 'switchyard_parked_runs{definition_id="approval",position="review",scope="default",version="1"}'
    assert samples[review] == 1
    assert samples["switchyard_queue_oldest_pending_seconds"] >= 0


def test_no_label_or_value_carries_a_payload_value(scrape: Any, client: Any, deploy: Any, drain: Any) -> None:
    deploy(ops.ORDER)
    operations.start(definition_id="order-signal", payload={"order": "SENTINEL-7f3a"}, business_key="KEY-7f3a")
    drain()
    text = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert "7f3a" not in text
    assert re.search(r"^switchyard_commands_settled_total\{", text, re.M)


def test_capture_states_are_gauges(scrape: Any) -> None:
    from capture.models import Capture

    for status in ("PENDING", "DISPATCHED", "DISPATCHED", "OUTCOME_UNKNOWN"):
        Capture.objects.create(model="demo.PurchaseOrder", object_pk="1", event="updated", status=status)
    samples = scrape()
    assert samples['switchyard_captures{state="DISPATCHED"}'] == 2
    assert samples['switchyard_captures{state="PENDING"}'] == 1
    assert samples['switchyard_captures{state="OUTCOME_UNKNOWN"}'] == 1


def test_multiprocess_mode_sums_every_process_on_the_host(tmp_path: Any) -> None:
    """Celery prefork children count in their own processes; with PROMETHEUS_MULTIPROC_DIR the
    /metrics of any process on the host reports their sum (docs/operations.md)."""
    import os
    import subprocess
    import sys

    # no database is needed (or reached: port 1 refuses at once) — the counters live in files
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
    }
    setup = "import django; django.setup(); from workflows import metrics; "
    for _ in range(2):  # two "worker children", each settling one START
        subprocess.run(
            [
                sys.executable,
                "-c",
                setup + "metrics.SETTLED.labels('START', 'COMPLETE').inc(); "
                "metrics.SEGMENT_SECONDS.labels('START').observe(0.02)",
            ],
            env=env,
            check=True,
            timeout=60,
        )
    scrape = subprocess.run(
        [sys.executable, "-c", setup + "print(metrics.exposition().decode())"],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert 'switchyard_commands_settled_total{kind="START",outcome="COMPLETE"} 2.0' in scrape.stdout
    assert 'switchyard_segment_duration_seconds_count{kind="START"} 2.0' in scrape.stdout
    assert "switchyard_metrics_database_up 0.0" in scrape.stdout  # an unreachable database fails no scrape
