"""The crash harness (lite): two real workers SIGKILLed every 15 s, connections terminated,
a worker frozen past its lease, fault points armed — and every invariant holds afterwards.

``python -m tests.reliability.run --full`` runs the nightly size (≥ 10,000 commands, 20 kills).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import tests.reliability.callbacks  # noqa: F401  (rel.effect is registered before the document loads)
from tests.reliability.harness import Config, Harness, write_report

pytestmark = [pytest.mark.services, pytest.mark.reliability, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(1800)
def test_every_invariant_holds_through_kills_freezes_and_lost_connections(tmp_path: Path) -> None:
    from django.db import connection

    from tests.reliability import callbacks

    config = Config.full() if os.environ.get("RELIABILITY_MODE") == "full" else Config.lite()
    database = connection.settings_dict["NAME"]
    harness = Harness(config, database=database, workdir=tmp_path, env={"SWITCHYARD_DB_NAME": database})
    try:
        report = harness.run()
    finally:
        callbacks.drop_tables()
    results = Path(os.environ.get("RELIABILITY_RESULTS", tmp_path))
    path = write_report(report, results)
    failing = {name: check for name, check in report["checks"].items() if not check["ok"]}
    assert report["ok"], f"{json.dumps(failing, indent=2, default=str)}\nreport: {path}\n{harness.fleet.logs()}"


WAIT = """
definitionId: rel-frozen
definitionVersion: 1
contract: {name: relfrozen.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


@pytest.mark.timeout(300)
def test_a_worker_frozen_inside_a_segment_past_its_lease_has_its_writes_refused(tmp_path: Path) -> None:
    """Worker 1 stops itself (SIGSTOP) inside its first segment, holding the run's lock, just
    before the settlement. Its lease lapses and worker 2 takes the claim back. Then worker 1 is
    resumed: its settlement is fenced by the token, its whole transaction rolls back, and the
    command is run again under a new claim — once."""
    from django.db import connection

    from tests.reliability.fleet import Fleet
    from tests.support.waiting import eventually
    from workflows import definitions, operations
    from workflows.models import Command, HistoryEntry, Run, SegmentLog

    ref = definitions.load(scope="default", text=WAIT, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")
    database = connection.settings_dict["NAME"]
    env = {**os.environ, "SWITCHYARD_DB_NAME": database, "WORKFLOWS_EXECUTOR_LEASE_SECONDS": "6",
           "SWEEP_INTERVAL_SECONDS": "2", "SWITCHYARD_SEGMENT_LOG": "1"}  # fmt: skip
    fleet = Fleet(env, tmp_path, workers=2, worker_env={1: {"SWITCHYARD_FAULTS": "before_settle:stop:#1"}})
    frozen, healthy = fleet.workers
    try:
        fleet.start_beat()
        fleet.start_worker(frozen)
        run_id = operations.start(definition_id="rel-frozen", payload={}).run_id
        eventually(lambda: frozen.state() == "T", timeout=60, what="worker 1 to stop inside the segment",
                   details=fleet.logs)  # fmt: skip
        start = Command.objects.get(run_id=run_id, kind="START")
        assert start.status == "CLAIMED"
        stale_token = start.token
        fleet.start_worker(healthy)
        eventually(lambda: Command.objects.get(pk=start.pk).token != stale_token, timeout=60,
                   what="the lapsed claim to be taken back", details=fleet.logs)  # fmt: skip
        assert Run.objects.get(pk=run_id).status == "PENDING"  # worker 1 still holds the lock
        fleet.thaw(frozen)  # SIGCONT: its segment goes on to its settlement
        eventually(lambda: Run.objects.get(pk=run_id).status == "WAITING", timeout=60,
                   what="the start to be run again", details=fleet.logs)  # fmt: skip
    finally:
        fleet.stop()
    start.refresh_from_db()
    assert (start.status, start.attempts) == ("COMPLETE", 2)
    segments = list(SegmentLog.objects.filter(command_id=start.pk))
    assert len(segments) == 1 and segments[0].token != stale_token and segments[0].claim_current
    types = list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))
    assert types.count("WORKFLOW_STARTED") == 1 and types.count("COMMAND_COMPLETED") == 1, types
