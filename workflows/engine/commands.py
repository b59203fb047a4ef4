"""Inserting commands into a run's queue, and cancelling timers with their commands (always
under the run's lock; arming timers is ``timers``).

The caller passes the locked run row (a dict); sequences are taken from and counted on it,
and the caller persists the counters (recording does it at once, a segment at its end).
"""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import UUID

from workflows import jsonvalues
from workflows.engine import db, observers
from workflows.engine.actors import Actor

INSERT = (
    "INSERT INTO workflow_commands (run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id, "
    "dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, available_at, fire_at, "
    "claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, reconcile_action, "
    "actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status) VALUES "
    "(%s,%s,%s,%s,'PENDING',%s,%s,%s,%s,%s,%s,0,0,0,clock_timestamp(),{order},{order},{fire},'','',%s,false,'','','',"
    "%s,%s,%s,%s,%s) RETURNING id, recorded_at, available_at, fire_at"
)
_PLAIN = INSERT.format(order="clock_timestamp()", fire="NULL")
# a command queued at a given time (a timer's TIMER command re-armed at its fire time)
INSERT_AT = INSERT.format(order="%s", fire="%s")


def fingerprint(value: Any) -> str:
    # each decimal in its normal form: 1000.1 and 1000.10 are one value (1 and 1.0 are not)
    return hashlib.sha256(jsonvalues.normal(value).encode("utf-8")).hexdigest()


def next_seq(run: dict[str, Any]) -> int:
    seq = int(run["next_seq"])
    run["next_seq"] = seq + 1
    return seq


def insert(run: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Insert a command at the run's next position (``insert_statement`` names the fields)."""
    sql, params, seq = insert_statement(run, **spec)
    return inserted(db.fetchone(sql, params, prepared=True), seq, spec["kind"])


def inserted(row: tuple[Any, ...] | None, seq: int, kind: str) -> dict[str, Any]:
    """What ``insert`` answers, from the row its statement returned."""
    assert row is not None
    return {"id": row[0], "seq": seq, "kind": kind, "recorded_at": row[1], "available_at": row[2], "status": "PENDING"}


def insert_statement(
    run: dict[str, Any],
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
    sql = _PLAIN
    extra: list[Any] = []
    if persist_counters:
        sql = (
            "WITH c AS (" + _PLAIN + "), u AS (UPDATE workflow_runs SET next_seq = %s, open_signals = %s, "
            "updated_at = now() WHERE id = %s) SELECT * FROM c"
        )
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
    return sql, params, seq


def cancel_timers(run_id: Any, *, timer_ids: list[int] | None = None, task_id: Any = None) -> list[dict[str, Any]]:
    """Cancel scheduled timers and their unsettled TIMER commands in one statement."""
    clauses = ["t.run_id = %s", "t.status = 'SCHEDULED'"]
    params: list[Any] = [run_id]
    if timer_ids is not None:
        if not timer_ids:
            return []
        clauses.append("t.id = ANY(%s)")
        params.append(timer_ids)
    if task_id is not None:
        clauses.append("t.task_id = %s")
        params.append(task_id)
    rows = db.fetchdicts(_CANCEL_TIMERS.format(where=" AND ".join(clauses)), params)
    observers.settled_on_commit(run_id, [(t["command_id"], "TIMER", "CANCELLED") for t in rows if t["settled"]])
    return rows


_CANCEL_TIMERS = (
    "WITH t AS (UPDATE workflow_timers t SET status = 'CANCELLED' WHERE {where} "
    "RETURNING t.id, t.command_id, t.kind, t.step, t.branch_id, t.task_id), "
    "c AS (UPDATE workflow_commands c SET status = 'CANCELLED', token = NULL, lease_until = NULL, "
    "settled_at = now(), last_error = 'TIMER_CANCELLED: the wait was left' FROM t "
    "WHERE c.id = t.command_id AND c.status IN ('PENDING','DEFERRED','PARKED','DEAD') RETURNING c.id) "
    "SELECT t.id, t.command_id, t.kind, t.step, t.branch_id, t.task_id, c.id IS NOT NULL AS settled "
    "FROM t LEFT JOIN c ON c.id = t.command_id"
)
# Timers of several runs, by id (the caller holds every run's lock).
CANCEL_TIMERS_BY_ID = _CANCEL_TIMERS.format(where="t.id = ANY(%s) AND t.status = 'SCHEDULED'")
