"""The named-SQL loader: every statement file loads, and a mistake in one fails loudly."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflows.engine import sql
from workflows.models import LIVE_STATUSES, RunStatus


def test_every_engine_sql_file_loads_with_its_names_resolved():
    files = sorted(sql.HERE.glob("*.sql"))
    for path in files:
        statements = sql.load(path.stem)
        for name in statements:
            text = statements[name]
            assert text.strip(), f"{path.name}:{name} is empty"
            assert "{@" not in text, f"{path.name}:{name} keeps an unresolved include"


def test_values_come_from_the_models_choices_and_fragments_are_included(tmp_path: Path):
    (tmp_path / "demo.sql").write_text(
        "-- name: columns\n"
        "id, status\n"
        "-- name: live\n"
        "-- The live runs, with a JSON literal the loader must leave alone.\n"
        "SELECT {@columns} FROM workflow_runs\n"
        "WHERE status IN ({LIVE_STATUSES}) AND status <> {RunStatus.WAITING} AND payload = '{}'::jsonb;\n",
        encoding="utf-8",
    )
    statements = sql.load("demo", tmp_path)
    expected_in = ", ".join(f"'{value}'" for value in sorted(LIVE_STATUSES))
    assert statements.live == (
        f"SELECT id, status FROM workflow_runs\n"
        f"WHERE status IN ({expected_in}) AND status <> '{RunStatus.WAITING.value}' AND payload = '{{}}'::jsonb"
    )
    assert statements.live is sql.load("demo", tmp_path).live  # one text per process
    with pytest.raises(AttributeError, match="no statement 'missing'"):
        _ = statements.missing


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT {RunStatus.WAITNG}\n", "names nothing"),
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "defined twice"),
        ("-- name: a\nSELECT {@b}\n", "names no statement"),
        ("SELECT 1\n-- name: a\nSELECT 2\n", "before the first"),
        ("-- name: a\n-- only a description\n", "is empty"),
    ],
)
def test_a_mistake_in_a_file_is_refused_at_load(text: str, message: str):
    with pytest.raises(sql.SQLFileError, match=message):
        sql.parse(text, "broken.sql")
