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

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]


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
