"""Behind PgBouncer in transaction pooling mode the engine prepares no statement.

A prepared statement lives on one server connection; behind a transaction pooler the next
transaction may get another one ("prepared statement _pg3_0 does not exist"). The settings'
``DATABASE_TRANSACTION_POOLING=true`` sets Django's ``DISABLE_SERVER_SIDE_CURSORS``, which the
engine reads. (tests/topology runs the whole product through a real PgBouncer.)
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from workflows.engine import pipeline

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def _prepared_after_repeating_a_hot_statement() -> int:
    connection.ensure_connection()
    raw: Any = connection.connection
    raw.prepare_threshold = None  # as Django leaves it
    if hasattr(connection, "_workflow_cursor"):
        del connection._workflow_cursor
    statement = "SELECT count(*) FROM workflow_runs WHERE id = %s::uuid"
    as_prepared = statement.replace("%s", "$1")
    count = "SELECT count(*) FROM pg_prepared_statements WHERE statement = %s"
    before = raw.execute(count, [as_prepared]).fetchone()
    for _ in range(5):
        with pipeline.statement_cursor(True) as cur:
            cur.execute(statement, ["00000000-0000-0000-0000-000000000000"]).fetchall()
    after = raw.execute(count, [as_prepared]).fetchone()
    return int(after[0]) - int(before[0])


def test_a_hot_statement_is_prepared_on_a_direct_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", raising=False)
    assert _prepared_after_repeating_a_hot_statement() == 1


def test_behind_a_transaction_pooler_nothing_is_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    assert _prepared_after_repeating_a_hot_statement() == 0
    assert connection.connection.prepare_threshold is None  # type: ignore[union-attr]
