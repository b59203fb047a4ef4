"""Logs operators read: one JSON line per settled command with exactly its run id, command
id, kind, outcome and duration — never a payload value — and no engine DEBUG in production."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils.module_loading import import_string

from tests.engine import conftest as engine_fixtures
from tests.support import ops
from workflows import operations

deploy = engine_fixtures.deploy  # the engine tests' fixtures: load+publish+activate, in-process executor
drain = engine_fixtures.drain

ROOT = Path(__file__).resolve().parents[2]
SENTINEL = "SENTINEL-5e1f"  # fits the order schema's maxLength of 20
SETTLED_FIELDS = {"run_id", "command_id", "kind", "outcome", "duration_ms"}
RECORD_ATTRIBUTES = set(logging.LogRecord("x", logging.INFO, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def production_formatter() -> logging.Formatter:
    config = dict(settings.LOGGING["formatters"]["json"])
    factory = import_string(config.pop("()"))
    return factory(**config)


@pytest.mark.django_db(transaction=True)
def test_a_settled_command_logs_exactly_its_ids_kind_outcome_and_duration(
    caplog: pytest.LogCaptureFixture, deploy: Any, drain: Any
) -> None:
    deploy(ops.ORDER)
    caplog.set_level(logging.DEBUG, logger="workflows")
    run_id = operations.start(definition_id="order-signal", payload={"order": SENTINEL}, business_key=SENTINEL).run_id
    drain()
    operations.signal(run_id=run_id, name="paid", payload={"amount": 4711.5, "note": SENTINEL})
    drain()
    settled = [r for r in caplog.records if r.name == "workflows.engine" and r.getMessage() == "command settled"]
    # the signal's segment also settles the wait's timeout timer (reported when it commits)
    assert [(r.kind, r.outcome) for r in settled] == [  # type: ignore[attr-defined]
        ("START", "COMPLETE"),
        ("TIMER", "CANCELLED"),
        ("SIGNAL", "COMPLETE"),
    ]
    formatter = production_formatter()
    for record in settled:
        assert set(record.__dict__) - RECORD_ATTRIBUTES == SETTLED_FIELDS
        line = formatter.format(record)
        assert "\n" not in line
        document = json.loads(line)
        assert set(document) == {"asctime", "levelname", "name", "message", *SETTLED_FIELDS}
        assert document["run_id"] == str(run_id) and document["outcome"] == record.outcome  # type: ignore[attr-defined]
        assert isinstance(document["command_id"], int) and isinstance(document["duration_ms"], float)
    # nothing the engine logged while running these commands carries a payload value
    for record in caplog.records:
        text = production_formatter().format(record)
        assert SENTINEL not in text and "4711.5" not in text


def _settings_in_a_fresh_process(**env: str) -> dict[str, Any]:
    code = (
        "import json, logging.config; from config import settings as s; logging.config.dictConfig(s.LOGGING); "
        "print(json.dumps({'format': s.LOG_FORMAT, 'formatter': s.LOGGING['handlers']['console']['formatter'], "
        "'root': s.LOGGING['root']['level'], 'workflows': s.LOGGING['loggers']['workflows']['level'], "
        "'engine_debug': logging.getLogger('workflows.engine').isEnabledFor(logging.DEBUG)})); "
        "logging.getLogger('workflows.engine').info('command settled', extra={'run_id': 'r', 'command_id': 1, "
        "'kind': 'START', 'outcome': 'COMPLETE', 'duration_ms': 1.5})"
    )
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "DATABASE_URL", "SECRET_KEY")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**keep, "DATABASE_URL": "postgres://u@127.0.0.1:5432/x", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {"settings": json.loads(result.stdout), "stderr": result.stderr}


def test_production_settings_log_json_without_engine_debug() -> None:
    run = _settings_in_a_fresh_process(LOG_LEVEL="DEBUG")
    assert run["settings"] == {
        "format": "json",
        "formatter": "json",
        "root": "DEBUG",
        "workflows": "INFO",
        "engine_debug": False,
    }
    line = json.loads(run["stderr"].strip().splitlines()[-1])
    assert line["message"] == "command settled" and line["kind"] == "START" and line["duration_ms"] == 1.5


def test_development_logs_readable_text_and_the_engine_level_is_its_own_setting() -> None:
    run = _settings_in_a_fresh_process(DEBUG="true", WORKFLOWS_LOG_LEVEL="DEBUG")
    assert run["settings"]["format"] == "text" and run["settings"]["engine_debug"] is True
    assert run["stderr"].strip().splitlines()[-1].endswith("INFO workflows.engine command settled")
