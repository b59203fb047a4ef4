"""Status values are written once, in the models' TextChoices: a source scan of the engine
modules whose SQL lives in ``engine/sql/*.sql`` finds no quoted status literal in them (a SQL
``'PENDING'`` or a Python ``status == "WAITING"``), and none in the statement files either
(those write ``{CommandStatus.PENDING}``, which the loader fills in)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workflows.engine import sql
from workflows.models import BranchStatus, CommandStatus, RunStatus, TaskStatus, Timer

ENGINE = Path(sql.HERE).parent
CONVERTED = (
    "bounds",
    "db",
    "effects",
    "evaluate",
    "executor",
    "faults",
    "history",
    "locks",
    "mail",
    "observers",
    "pipeline",
    "probe",
    "reconcile",
    "recording",
    "redaction",
    "rows",
    "wakeups",
    "webhooks",
)
STATUSES = (RunStatus, CommandStatus, TaskStatus, BranchStatus, Timer.Status)
VALUES = sorted({value for choices in STATUSES for value in choices.values})
ALTERNATIVES = "|".join(VALUES)
SQL_LITERAL = re.compile(rf"'({ALTERNATIVES})'")
PYTHON_COMPARISON = re.compile(rf"status[\"']?\]?\s*(?:==|!=|not in|in)\s*\(?\s*\"({ALTERNATIVES})\"")


def _hits(text: str) -> list[str]:
    return [m.group(0) for pattern in (SQL_LITERAL, PYTHON_COMPARISON) for m in pattern.finditer(text)]


@pytest.mark.parametrize("module", CONVERTED)
def test_a_converted_engine_module_writes_no_status_literal(module: str):
    text = (ENGINE / f"{module}.py").read_text(encoding="utf-8")
    assert _hits(text) == [], f"workflows/engine/{module}.py spells a status; use the models' TextChoices"


def test_no_statement_file_spells_a_status():
    for path in sorted(sql.HERE.glob("*.sql")):
        assert _hits(path.read_text(encoding="utf-8")) == [], f"{path.name} spells a status; write {{RunStatus.X}}"


def test_the_scan_finds_what_it_looks_for():
    assert _hits("UPDATE workflow_commands SET status = 'PENDING'") == ["'PENDING'"]
    assert _hits('if run["status"] == "WAITING":') == ['status"] == "WAITING"']
    assert _hits("WHERE status = {CommandStatus.PENDING} AND type = 'DECISION'") == []
