"""The queries package: its statement files load with every name resolved, and the capture
counts come from the capture app only when it is installed."""

from __future__ import annotations

from typing import Any

import pytest

from workflows import queries
from workflows.engine import sql
from workflows.queries.sql import QUERIES_SQL_DIR


def test_every_queries_sql_file_loads_with_its_names_resolved() -> None:
    files = sorted(QUERIES_SQL_DIR.glob("*.sql"))
    assert {path.stem for path in files} >= {"runs", "history", "ops"}
    for path in files:
        statements = sql.load(path.stem, QUERIES_SQL_DIR)
        for name in statements:
            assert statements[name].strip(), f"{path.name}:{name} is empty"
            assert "{@" not in statements[name], f"{path.name}:{name} keeps an unresolved include"


@pytest.mark.django_db
def test_without_the_capture_app_there_is_nothing_to_count(monkeypatch: Any) -> None:
    from django.apps import apps

    installed = apps.is_installed
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "capture" and installed(name))
    assert queries.capture_counts() == {}
    assert queries.outcome_unknown_captures() == []
