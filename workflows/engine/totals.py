"""Totals of the ended runs per revision and status, for the operations dashboard.

Counting every run ever kept on each load grows with the history (a GROUP BY over a million
runs took most of a second, ``bench/bigtables.py``). The runs that are not ended are few and
the dashboard counts them live (``queries.runs_by_revision``, the partial index
``workflow_run_open``); the ended ones change only by ending and by the retention purge, so they
are counted here, in the background (the beat task ``workflows.run_totals``, every minute), into
a snapshot the dashboard reads with the time it was counted at (``workflow_run_totals``).

A refresh replaces the snapshot in one transaction: the dashboard reads the previous one until
it commits, never a half-written one. Refreshes take the table lock first, so two of them (the
beat and a first page load) run one after the other, and the second re-checks before it counts
again when it only wanted a snapshot to exist.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from workflows.engine import db, sql

SQL = sql.load("totals")


def counted_at() -> datetime | None:
    """When the stored snapshot was counted; None when none is stored (never counted, or no
    run had ended at the last count)."""
    row = db.fetchone(SQL.counted_at)
    at: datetime | None = row[0] if row else None
    return at


def refresh(*, only_if_missing: bool = False) -> datetime:
    """Count the ended runs per revision and status and replace the snapshot with the counts,
    in one transaction; answers the time they were counted at. With ``only_if_missing``, a
    snapshot stored in the meantime (by the beat, another page) is kept and its time answered."""
    with transaction.atomic():
        db.execute(SQL.lock_totals)
        if only_if_missing:
            stored = counted_at()
            if stored is not None:
                return stored
        db.execute(SQL.clear_totals)
        row = db.fetchone(SQL.count_ended)
    assert row is not None  # the statement answers one row, whatever it counted
    at: datetime = row[0]
    return at
