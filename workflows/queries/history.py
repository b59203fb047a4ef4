"""Reads of a run's history for the run viewer: pages by keyset, a decision's states before
and after, and the path the run took.

Callers go through the package (``from workflows import queries``), which re-exports these.
Statements: ``workflows/queries/sql/history.sql``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from workflows.engine import sql
from workflows.models import HistoryEntry
from workflows.queries.runs import db_rows
from workflows.queries.sql import QUERIES_SQL_DIR

SQL = sql.load("history", QUERIES_SQL_DIR)


def history(*, run_id: Any) -> QuerySet[HistoryEntry]:
    return HistoryEntry.objects.filter(run_id=run_id).order_by("seq")


HISTORY_PAGE = 50
# timeline filters: a name the page offers -> the entry types it shows (a trailing * is a prefix)
HISTORY_FILTERS: dict[str, tuple[str, ...]] = {
    "decisions": ("DECISION", "STATE_BASELINE"),
    "commands": ("COMMAND_*", "DEAD_LETTERS_REOFFERED"),
    "signals": ("SIGNAL_*",),
    "tasks": ("TASK_*",),
    "timers": ("TIMER_*", "TIMEOUT"),
    "effects": ("EMAIL_*", "EFFECT_*", "SERVICE_*", "INTENT_*"),
    "lifecycle": ("WORKFLOW_*", "CANCELLED", "FAILED", "COMPENSATION_*", "MIGRAT*", "BRANCH_*", "JOIN_*", "CALL_*"),
}


def _types_filter(name: str) -> Q:
    q = Q()
    for pattern in HISTORY_FILTERS[name]:
        q |= Q(type__startswith=pattern[:-1]) if pattern.endswith("*") else Q(type=pattern)
    return q


def history_page(
    *,
    run_id: Any,
    after: int | None = None,
    before: int | None = None,
    only: str | None = None,
    limit: int = HISTORY_PAGE,
    newest_first: bool = False,
) -> tuple[list[HistoryEntry], bool]:
    """One page of a run's history by keyset on ``seq`` (cheap at any depth: the (run, seq)
    index answers it without counting or skipping rows). Answers (entries, more after them).

    ``after``/``before`` are exclusive seq bounds; ``only`` names one of HISTORY_FILTERS.
    """
    qs = HistoryEntry.objects.filter(run_id=run_id)
    if only:
        qs = qs.filter(_types_filter(only))
    if after is not None:
        qs = qs.filter(seq__gt=after)
    if before is not None:
        qs = qs.filter(seq__lt=before)
    rows = list(qs.order_by("-seq" if newest_first else "seq")[: limit + 1])
    return rows[:limit], len(rows) > limit


def decision_change(*, run_id: Any, seq: int) -> dict[str, Any]:
    """A DECISION entry with the (logged, redacted) state before and after it and its patch,
    rebuilt from the latest STATE_BASELINE before it plus the patches in between.

    Answers ``{"entry", "before", "after", "patch", "complete"}``; ``complete`` is False when
    no baseline precedes the entry (the states cannot be rebuilt). A branch's local decision
    carries only its patch. Raises HistoryEntry.DoesNotExist for another entry.
    """
    from workflows.engine.history import replay

    entry = HistoryEntry.objects.get(run_id=run_id, seq=seq, type="DECISION")
    result: dict[str, Any] = {"entry": entry, "patch": entry.patch, "before": None, "after": None, "complete": False}
    if entry.branch_id:
        return result
    baseline = HistoryEntry.objects.filter(run_id=run_id, type="STATE_BASELINE", seq__lt=seq).order_by("-seq").first()
    if baseline is None:
        return result
    between: list[dict[str, Any]] = [
        dict(row)
        for row in HistoryEntry.objects.filter(run_id=run_id, type="DECISION", seq__gt=baseline.seq, seq__lt=seq)
        .exclude(patch__isnull=True)
        .order_by("seq")
        .values("type", "patch", "payload", "branch_id")
    ]
    start = {"type": "STATE_BASELINE", "patch": None, "payload": baseline.payload, "branch_id": ""}
    before = replay([start, *between])
    if entry.patch is None:
        # too large to log as a patch: the full state follows at once as a baseline
        following = HistoryEntry.objects.filter(run_id=run_id, seq=seq + 1, type="STATE_BASELINE").first()
        after = (following.payload or {}).get("state") if following is not None else None
    else:
        after = replay([start, *between, {"type": "DECISION", "patch": entry.patch, "payload": None, "branch_id": ""}])
    result.update(before=before, after=after, complete=True)
    return result


def path_taken(*, run_id: Any) -> tuple[list[str], set[tuple[str, str]]]:
    """The steps a run went through (first visit order) and the step-to-step moves it made,
    from its DECISION entries (per branch), computed in the database."""
    rows = db_rows(SQL.path_taken, [run_id])
    visited: dict[str, None] = {}
    moves: set[tuple[str, str]] = set()
    for prev, step, _first in rows:
        if step:
            visited.setdefault(step, None)
        if prev and step and prev != step:
            moves.add((prev, step))
    return list(visited), moves
