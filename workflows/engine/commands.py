"""Inserting commands into a run's queue, and cancelling timers with their commands (always
under the run's lock; arming timers is ``timers``).

The caller passes the locked run row (``rows.RunQueue``); sequences are taken from and counted on it,
and the caller persists the counters (recording does it at once, a segment at its end).
"""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import UUID

from workflows import jsonvalues
from workflows.engine import db, observers, sql
from workflows.engine.actors import Actor
from workflows.engine.rows import RunQueue
from workflows.models import CommandKind, CommandStatus

SQL = sql.load("commands")


def fingerprint(value: Any) -> str:
    # each decimal in its normal form: 1000.1 and 1000.10 are one value (1 and 1.0 are not)
    return hashlib.sha256(jsonvalues.normal(value).encode("utf-8")).hexdigest()


def next_seq(run: RunQueue) -> int:
    seq = int(run["next_seq"])
    run["next_seq"] = seq + 1
    return seq


def insert(run: RunQueue, **spec: Any) -> dict[str, Any]:
    """Insert a command at the run's next position (``insert_statement`` names the fields)."""
    sql, params, seq = insert_statement(run, **spec)
    return inserted(db.fetchone(sql, params, prepared=True), seq, spec["kind"])


def inserted(row: tuple[Any, ...] | None, seq: int, kind: str) -> dict[str, Any]:
    """What ``insert`` answers, from the row its statement returned."""
    assert row is not None
    return {
        "id": row[0],
        "seq": seq,
        "kind": kind,
        "recorded_at": row[1],
        "available_at": row[2],
        "status": CommandStatus.PENDING,
    }


def insert_statement(
    run: RunQueue,
    *,
    kind: str,
    actor: Actor,
    payload: Any = None,
    target: Any = None,
    task_id: UUID | str | None = None,
    dedup_key: str = "",
    fp: str = "",
    context: Any = None,
    persist_counters: bool = False,
) -> tuple[str, list[Any], int]:
    """Insert a command at the run's next position: the statement, and the position it takes
    (counted on ``run`` now), for ``insert`` or a caller that batches it with other statements.
    ``persist_counters`` writes the run's queue counters (next sequence, open signals) in the
    same statement (recording paths)."""
    seq = next_seq(run)
    text = SQL.insert
    extra: list[Any] = []
    if persist_counters:
        text = SQL.insert_counting
        extra = [run["next_seq"], run["open_signals"], run["id"]]
    params = [
        run["id"],
        seq,
        kind,
        "",
        db.jsonb(payload),
        db.jsonb(target),
        task_id,
        None,
        dedup_key,
        fp,
        db.jsonb(context),
        *actor.columns(),
        *extra,
    ]
    return text, params, seq


def cancel_timers(run_id: Any, *, timer_ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Cancel scheduled timers of a run (``timer_ids``: just those) and their unsettled TIMER
    commands in one statement."""
    if timer_ids is None:
        rows = db.fetchdicts(SQL.cancel_timers_of_run, [run_id])
    elif not timer_ids:
        return []
    else:
        rows = db.fetchdicts(SQL.cancel_timers_of_run_by_id, [run_id, timer_ids])
    observers.settled_on_commit(
        run_id, [(t["command_id"], CommandKind.TIMER, CommandStatus.CANCELLED) for t in rows if t["settled"]]
    )
    return rows
