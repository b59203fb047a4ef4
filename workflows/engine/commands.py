"""Inserting commands and timers into a run's queue (always under the run's lock).

The caller passes the locked run row (a dict); sequences are taken from and counted on it,
and the caller persists the counters (recording does it at once, a segment at its end).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any
from uuid import UUID

from workflows import jsonvalues
from workflows.engine import db, observers
from workflows.engine.actors import TIMER, Actor

INSERT = (
    "INSERT INTO workflow_commands (run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id, "
    "dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, available_at, fire_at, "
    "claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, reconcile_action, "
    "actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status) VALUES "
    "(%s,%s,%s,%s,'PENDING',%s,%s,%s,%s,%s,%s,0,0,0,clock_timestamp(),{order},{order},{fire},'','',%s,false,'','','',"
    "%s,%s,%s,%s,%s) RETURNING id, recorded_at, available_at, fire_at"
)
_PLAIN = INSERT.format(order="clock_timestamp()", fire="NULL")


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


def insert_timer(run: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A timer row and the TIMER command that fires it, inserted together in one statement
    (logged as SYSTEM; ``timer_statement`` names the fields)."""
    sql, params, seq = timer_statement(run, **spec)
    return timer_row(db.fetchone(sql, params, prepared=True), seq)


def timer_row(row: tuple[Any, ...] | None, seq: int) -> dict[str, Any]:
    """What ``insert_timer`` answers, from the row its statement returned."""
    assert row is not None
    return {"id": row[0], "timer_id": row[1], "fire_at": row[2], "seq": seq}


def timer_statement(
    run: dict[str, Any],
    *,
    timer_kind: str,
    step: str,
    delay_seconds: float = 0.0,
    at: datetime | None = None,
    branch_id: str = "",
    task_id: UUID | str | None = None,
    target: dict[str, Any] | None = None,
    interval_seconds: float | None = None,
    due_task: UUID | str | None = None,
) -> tuple[str, list[Any], int]:
    """A timer row and its TIMER command: the statement, and the queue position it takes
    (counted on ``run`` now), for ``insert_timer`` or a caller that batches it. ``due_task``
    also sets that task's due date to the fire time."""
    seq = next_seq(run)
    full_target = dict(target or {})
    full_target["step"] = step
    if branch_id:
        full_target["branch"] = branch_id
    params = [
        run["id"],
        timer_kind,
        step,
        branch_id,
        task_id,
        delay_seconds,
        at,
        interval_seconds,
        run["id"],
        seq,
        timer_kind,
        db.jsonb(full_target),
        task_id,
        *TIMER.columns(),
        due_task,
    ]
    return INSERT_TIMER, params, seq


# -- name: insert_timer
# The ids of both rows are drawn first, so the timer names its command and the command its
# timer without a second write; the fire time is the database clock's.
INSERT_TIMER = (
    "WITH ids AS (SELECT nextval(pg_get_serial_sequence('workflow_timers', 'id')) AS timer_id, "
    "nextval(pg_get_serial_sequence('workflow_commands', 'id')) AS command_id), "
    "t AS (INSERT INTO workflow_timers (id, run_id, command_id, kind, status, step, branch_id, task_id, fire_at, "
    "interval_seconds, context, created_at) SELECT ids.timer_id, %s, ids.command_id, %s, 'SCHEDULED', %s, %s, %s, "
    "greatest(clock_timestamp() + make_interval(secs => %s), coalesce(%s, '-infinity'::timestamptz)), %s, NULL, "
    "now() FROM ids RETURNING id, fire_at), "
    "c AS (INSERT INTO workflow_commands (id, run_id, seq, kind, timer_kind, status, payload, target, task_id, "
    "timer_id, dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, "
    "available_at, fire_at, claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, "
    "reconcile_action, actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status) "
    "SELECT ids.command_id, %s, %s, 'TIMER', %s, 'PENDING', NULL, %s::jsonb || jsonb_build_object('timer', t.id), "
    "%s, t.id, '', '', 0, 0, 0, clock_timestamp(), t.fire_at, t.fire_at, t.fire_at, '', '', NULL, false, '', '', "
    "'', %s, %s, %s, %s, %s FROM ids, t RETURNING id), "
    "d AS (UPDATE workflow_tasks SET due_at = t.fire_at FROM t WHERE workflow_tasks.id = %s) "
    "SELECT c.id, t.id, t.fire_at FROM c, t"
)


def rearm_timer(run: dict[str, Any], timer: dict[str, Any]) -> dict[str, Any]:
    """A new TIMER command for an existing timer row, keeping its original fire time."""
    seq = next_seq(run)
    target = {"step": timer["step"], "timer": timer["id"]}
    if timer.get("branch_id"):
        target["branch"] = timer["branch_id"]
    sql = INSERT.format(order="%s", fire="%s")
    row = db.fetchone(
        sql,
        [
            run["id"],
            seq,
            "TIMER",
            timer["kind"],
            None,
            db.jsonb(target),
            timer.get("task_id"),
            timer["id"],
            "",
            "",
            timer["fire_at"],
            timer["fire_at"],
            timer["fire_at"],
            None,
            *TIMER.columns(),
        ],
    )
    assert row is not None
    db.execute("UPDATE workflow_timers SET command_id = %s, status = 'SCHEDULED' WHERE id = %s", [row[0], timer["id"]])
    return {"id": row[0], "seq": seq, "fire_at": timer["fire_at"]}


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
