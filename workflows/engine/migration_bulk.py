"""Set-based moves: a batch of runs moved by the Apply that selected them, in a few statements.

``apply_batch`` holds the execution locks of a batch of runs (taken together, without
waiting). For the commonest migration — runs parked at an approval, a timer or a signal wait
moved to an approval or a timer of the target revision — running one MIGRATION segment per
run costs a claim, a lock, a savepoint and a dozen round trips each. Here the same writes are
made for the whole batch at once: one statement per kind of row (the MIGRATION commands,
settled; the parks closed and opened; the approvals withdrawn and opened; the timers disarmed
and armed; the notices; the decision log; the run rows), so Apply moves hundreds of runs per
second and answers with what it moved.

The history, parks, tasks, timers and notices are exactly those of the MIGRATION segment
(``migration.apply_migration``): each run's entries are built by the same code (a ``Drive``
per run, the human-task node's ``prepare``/``opened``), only the writes are gathered. A run
this path does not cover — a call or join wait, parked signals, a registered state handler,
a state the target's schema refuses, a target node of another type, active branches, a target
revision not available, an expression that fails for that run — gets a MIGRATION command as
before, and its segment applies (or rejects) it with the full checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workflows.definitions import plan as p
from workflows.definitions.plan import Plan
from workflows.engine import commands, db, history, observers, settlement, wakeups
from workflows.engine.actors import TIMER, Actor
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.nodes import human_task
from workflows.engine.nodes.timer import delay_of
from workflows.exceptions import WorkflowError

WAITS = ("task", "timer", "signal")  # the waits a run is moved away from here


@dataclass
class _Move:
    item: dict[str, Any]
    run: dict[str, Any]
    step: p.HumanTaskStep | p.TimerStep
    drive: Drive | None = None
    opening: human_task.Opening | None = None
    delay: tuple[float, Any] | None = None  # a timer node's delay
    timers: list[dict[str, Any]] = field(default_factory=list)  # the timers armed: spec + ids
    command_id: int = 0
    seq: int = 0
    park_id: int = 0
    withdrawn: list[dict[str, Any]] = field(default_factory=list)  # the approvals leaving withdraws
    disarmed: list[dict[str, Any]] = field(default_factory=list)  # the wait's timers leaving disarms


def move(
    rec: dict[str, Any], chosen: list[tuple[dict[str, Any], dict[str, Any]]], actor: Actor
) -> tuple[list[tuple[int, str, str, int | None]], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Move what can be moved set-based; answers the items' outcomes (MOVED with the command)
    and the (item, run) pairs left for MIGRATION commands."""
    from workflows.definitions import cache, schemas
    from workflows.engine import executor, migration

    moves = [(item, run) for item, run in chosen if item["action"] == "move"]
    if not moves:
        return [], chosen
    scope, version = str(rec["target_scope"]), int(rec["target_version"])
    try:
        source = cache.get_plan(scope=rec["scope"], definition_id=rec["definition_id"], version=rec["source_version"])
        target = cache.get_plan(scope=scope, definition_id=rec["definition_id"], version=version)
    except WorkflowError:
        return [], chosen
    if target.contract.name != source.contract.name or migration.handler_for(
        rec["definition_id"], int(rec["source_version"]), version
    ):
        return [], chosen
    available = db.fetchone(
        "SELECT 1 FROM workflow_definitions WHERE scope = %s AND definition_id = %s AND version = %s "
        "AND status = 'AVAILABLE' AND coalesce(failure, '') = '' FOR SHARE",
        [scope, rec["definition_id"], version],
    )
    if available is None:
        return [], chosen
    ids = [str(run["id"]) for _, run in moves]
    busy = {str(r[0]) for r in db.fetchall(BUSY, [ids, ids])}
    eligible: list[_Move] = []
    for item, run in moves:
        step = target.steps.get(str(item["target_node"] or migration.parked_at(run)))
        wait = run["wait"] or {}
        if (
            not isinstance(step, p.HumanTaskStep | p.TimerStep)
            or wait.get("kind") not in WAITS
            or wait.get("child")
            or int(run["open_signals"] or 0)
            or str(run["id"]) in busy
            or scope not in (run["scope"], run["start_scope"], "default")
            or (target.state_schema and schemas.validate(target.state_schema, run["state"]))
        ):
            continue
        eligible.append(_Move(item, run, step))
    if not eligible:
        return [], chosen
    _prepare(eligible, source, actor)
    eligible = [m for m in eligible if m.drive is not None]
    if not eligible:
        return [], chosen
    _leaving(eligible)
    _allocate(eligible)
    fire_at = _write(eligible, rec, actor, executor.executor_id())
    _build(eligible, rec, target, actor, fire_at)
    _save(eligible)
    moved = {id(m.item) for m in eligible}
    outcomes: list[tuple[int, str, str, int | None]] = [
        (int(m.item["id"]), "MOVED", "", m.command_id) for m in eligible
    ]
    return outcomes, [(item, run) for item, run in chosen if id(item) not in moved]


# -- name: bulk_busy_runs
# Runs whose MIGRATION command would not be the next thing applied to them: an approver's
# completion, a due timer or any other command ahead of it in the queue (or parked), or
# branches still running. Their commands are recorded, so the queue decides who comes first.
BUSY = (
    "SELECT run_id FROM workflow_commands WHERE run_id = ANY(%s::uuid[]) AND (status = 'PARKED' OR "
    "(status IN ('PENDING','DEFERRED','CLAIMED') AND order_at <= clock_timestamp())) "
    "UNION SELECT run_id FROM workflow_branches WHERE run_id = ANY(%s::uuid[]) AND status IN ('RUNNING','WAITING')"
)


def _prepare(moves: list[_Move], source: Plan, actor: Actor) -> None:
    """Per run, what entering the target node takes from its state; a run whose expressions
    fail is left for its MIGRATION segment (which rejects it with the framework's text)."""
    from workflows.engine import executor

    pointers: dict[Any, Any] = {}  # the redactors are asked once per revision for the batch
    for m in moves:
        run = dict(m.run)
        drive = Drive.for_run(run, source, actor, command_kind="MIGRATION", executor_id=executor.executor_id())
        drive.history._pointers = pointers
        try:
            if isinstance(m.step, p.HumanTaskStep):
                m.opening = human_task.prepare(drive, m.step)
                m.timers = [dict(spec) for spec in human_task.timer_specs(m.step, m.opening)]
            else:
                m.delay = delay_of(drive, m.step.delay, m.step.id)
                m.timers = [{"timer_kind": "FIRE", "step": m.step.id, "delay_seconds": m.delay[0], "at": m.delay[1]}]
        except (DeterministicFailure, WorkflowError):
            continue
        m.drive = drive


# -- name: allocate_ids
# The ids of the batch's commands, parks and timers, drawn in one statement so every row (and
# the history entries naming them) can be written without reading one back.
ALLOCATE = (
    "SELECT array(SELECT nextval(pg_get_serial_sequence('workflow_commands', 'id')) FROM generate_series(1, %s)), "
    "array(SELECT nextval(pg_get_serial_sequence('workflow_parks', 'id')) FROM generate_series(1, %s)), "
    "array(SELECT nextval(pg_get_serial_sequence('workflow_timers', 'id')) FROM generate_series(1, %s))"
)


def _allocate(moves: list[_Move]) -> None:
    timers = sum(len(m.timers) for m in moves)
    row = db.fetchone(ALLOCATE, [len(moves) + timers, len(moves), timers])
    assert row is not None
    command_ids, park_ids, timer_ids = iter(row[0]), iter(row[1]), iter(row[2])
    for m in moves:
        run = m.drive.run  # type: ignore[union-attr]
        m.command_id, m.park_id = int(next(command_ids)), int(next(park_ids))
        m.seq = commands.next_seq(run)  # the command's queue position, then its timers'
        for t in m.timers:
            t["timer_id"], t["command_id"] = int(next(timer_ids)), int(next(command_ids))
            t["seq"] = commands.next_seq(run)


def _leaving(moves: list[_Move]) -> None:
    """The main path's open approvals and the wait's armed timers of each run (what leaving
    withdraws and disarms), read under the runs' locks."""
    by_run = {str(m.run["id"]): m for m in moves}
    for row in db.fetchdicts(
        "SELECT id, run_id, step FROM workflow_tasks WHERE run_id = ANY(%s::uuid[]) AND branch_id = '' "
        "AND status IN ('OPEN','COMPLETING') ORDER BY run_id, created_at, id",
        [list(by_run)],
    ):
        by_run[str(row["run_id"])].withdrawn.append(row)
    timer_ids = [int(t) for m in moves for t in (m.run["wait"] or {}).get("timers", [])]
    if timer_ids:
        for row in db.fetchdicts(
            "SELECT id, run_id, command_id, step FROM workflow_timers WHERE id = ANY(%s) AND status = 'SCHEDULED' "
            "ORDER BY run_id, id",
            [timer_ids],
        ):
            by_run[str(row["run_id"])].disarmed.append(row)


def _build(moves: list[_Move], rec: dict[str, Any], target: Plan, actor: Actor, fire_at: dict[int, Any]) -> None:
    """Each run's history and row, built by the segment's own code in the segment's order."""
    from workflows.engine import migration, waits

    for m in moves:
        drive = m.drive
        assert drive is not None
        run = drive.run
        drive.command_id = m.command_id
        drive.history._command_documents[m.command_id] = [None]  # a MIGRATION carries no payload
        cmd = {"id": m.command_id, "kind": "MIGRATION", "seq": m.seq}
        settlement.received(drive, cmd)
        for t in m.withdrawn:
            drive.history.add(
                "TASK_WITHDRAWN",
                step=t["step"],
                command_id=m.command_id,
                actor=actor,
                payload={"task": str(t["id"]), "reason": "moved"},
            )
        for t in m.disarmed:
            drive.history.add("TIMER_CANCELLED", step=t["step"], command_id=t["command_id"], actor=actor)
        origin = migration._from(run)
        run["wait"], run["status"] = None, "RUNNING"
        run["scope"], run["version"], run["plan_hash"] = (
            rec["target_scope"],
            int(rec["target_version"]),
            target.plan_hash,
        )
        drive.plan = target
        drive.history.scope, drive.history.version, drive.history.plan_hash = (
            run["scope"],
            run["version"],
            target.plan_hash,
        )
        step = m.step
        drive.history.add(
            "WORKFLOW_MIGRATED",
            step=step.id,
            command_id=m.command_id,
            actor=actor,
            payload={
                "action": "move",
                "from": origin,
                "to": {"scope": run["scope"], "version": run["version"], "step": step.id},
                "migration": int(rec["id"]),
            },
        )
        drive.history.baseline(
            run["state"], version=int(run["state_version"]), command_id=m.command_id, actor=actor, step=step.id
        )
        drive.count_step()
        run["current_step"] = step.id
        armed = [
            {"id": t["command_id"], "timer_id": t["timer_id"], "fire_at": fire_at[t["timer_id"]], "seq": t["seq"]}
            for t in m.timers
        ]
        if isinstance(step, p.HumanTaskStep):
            assert m.opening is not None
            human_task.opened(drive, step, m.opening, park_id=m.park_id, timers=armed)
        else:
            wait = waits.enter(
                drive, step=step.id, kind="timer", park_kind="TIMER", outcome="wait-timer", park_id=m.park_id
            )
            waits.timer_added(drive, wait, armed[0])
            wait["fire"] = armed[0]["timer_id"]
        settlement.completed(drive, cmd)


# -- name: bulk_migration_commands
# The batch's MIGRATION commands, recorded already settled (the Apply is their segment).
INSERT_COMMANDS = (
    "INSERT INTO workflow_commands (id, run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id, "
    "dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, available_at, "
    "fire_at, claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, reconcile_action, "
    "actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status, settled_at) "
    "SELECT v.id, v.run_id, v.seq, 'MIGRATION', '', 'COMPLETE', NULL, v.target, NULL, NULL, '', '', 1, 0, 0, "
    "clock_timestamp(), clock_timestamp(), clock_timestamp(), NULL, %s, '', NULL, false, '', '', '', "
    "%s, %s, %s, %s, %s, now() "
    "FROM unnest(%s::bigint[], %s::uuid[], %s::int[], %s::jsonb[]) AS v(id, run_id, seq, target)"
)

# -- name: bulk_close_parks
CLOSE_PARKS = (
    "UPDATE workflow_parks k SET left_at = now(), left_how = 'moved', moved_to_version = %s, moved_to_scope = %s, "
    "moved_to_node = v.node, moved_by = %s, migration_id = %s FROM unnest(%s::bigint[], %s::text[]) AS v(id, node) "
    "WHERE k.id = v.id AND k.left_at IS NULL"
)

# -- name: bulk_withdraw_tasks
WITHDRAW_TASKS = (
    "UPDATE workflow_tasks SET status = 'WITHDRAWN', reservation_owner = NULL, closed_at = now(), updated_at = now() "
    "WHERE id = ANY(%s::uuid[]) AND status IN ('OPEN','COMPLETING')"
)

# -- name: bulk_open_parks
OPEN_PARKS = (
    "INSERT INTO workflow_parks (id, run_id, scope, definition_id, version, node, kind, branch_id, since, left_how, "
    "moved_to_scope, moved_to_node, moved_by) SELECT v.id, v.run_id, %s, %s, %s, v.node, v.kind, '', now(), '', '', "
    "'', '' FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::text[]) AS v(id, run_id, node, kind)"
)

# -- name: bulk_open_tasks
OPEN_TASKS = (
    "INSERT INTO workflow_tasks (id, run_id, branch_id, step, title, description, task_type, assignment_mode, "
    "assignment_value, status, decisions, require_version_stability, subject_version, due_at, "
    "reminder_every_seconds, reminder_count, reservation_owner, decision, completed_by, created_at, updated_at) "
    "SELECT v.id, v.run_id, '', v.step, v.title, v.description, v.task_type, v.mode, v.value, 'OPEN', v.decisions, "
    "v.stable, v.subject_version, NULL, v.reminder, 0, NULL, '', '', now(), now() FROM unnest(%s::uuid[], "
    "%s::uuid[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::bool[], "
    "%s::text[], %s::float8[]) AS v(id, run_id, step, title, description, task_type, mode, value, decisions, stable, "
    "subject_version, reminder)"
)

# -- name: bulk_arm_timers
# Timer rows and their TIMER commands with the ids drawn before (each names the other); a due
# date also sets its task's due time to the fire time.
ARM_TIMERS = (
    "WITH f AS (SELECT v.*, greatest(clock_timestamp() + make_interval(secs => v.delay), "
    "coalesce(v.at, '-infinity'::timestamptz)) AS fire_at FROM unnest(%s::bigint[], %s::bigint[], %s::uuid[], "
    "%s::text[], %s::text[], %s::uuid[], %s::float8[], %s::timestamptz[], %s::float8[], %s::int[], %s::bool[]) "
    "AS v(timer_id, command_id, run_id, kind, step, task_id, delay, at, interval_seconds, seq, due)), "
    "t AS (INSERT INTO workflow_timers (id, run_id, command_id, kind, status, step, branch_id, task_id, fire_at, "
    "interval_seconds, context, created_at) SELECT f.timer_id, f.run_id, f.command_id, f.kind, 'SCHEDULED', f.step, "
    "'', f.task_id, f.fire_at, f.interval_seconds, NULL, now() FROM f), "
    "c AS (INSERT INTO workflow_commands (id, run_id, seq, kind, timer_kind, status, payload, target, task_id, "
    "timer_id, dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, "
    "available_at, fire_at, claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, "
    "reconcile_action, actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status) "
    "SELECT f.command_id, f.run_id, f.seq, 'TIMER', f.kind, 'PENDING', NULL, "
    "jsonb_build_object('step', f.step, 'timer', f.timer_id), f.task_id, f.timer_id, '', '', 0, 0, 0, "
    "clock_timestamp(), f.fire_at, f.fire_at, f.fire_at, '', '', NULL, false, '', '', '', %s, %s, %s, %s, %s "
    "FROM f), "
    "d AS (UPDATE workflow_tasks k SET due_at = f.fire_at FROM f WHERE k.id = f.task_id AND f.due) "
    "SELECT f.run_id, f.fire_at FROM f"
)

# -- name: bulk_save_runs
SAVE_RUNS = (
    "UPDATE workflow_runs r SET status = v.status, current_step = v.current_step, wait = v.wait, "
    "next_seq = v.next_seq, history_seq = v.history_seq, scope = v.scope, version = v.version, "
    "plan_hash = v.plan_hash, updated_at = now() FROM jsonb_to_recordset(%s) AS v(id uuid, status text, "
    "current_step text, wait jsonb, next_seq integer, history_seq integer, scope text, version integer, "
    "plan_hash text) WHERE r.id = v.id"
)

# -- name: bulk_notices
# The opened approvals' notices, one statement per assignee: delivered at once when nobody can
# receive them, else PENDING for the outbox (as the node's own notice statement).
NOTICES = (
    "INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key, "
    "status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at) "
    "SELECT v.run_id, v.command_id, '', 'NOTIFY', v.task, '{{\"reason\": \"opened\"}}'::jsonb, '{{}}'::jsonb, "
    "'notify:' || v.task || ':opened:0', CASE WHEN r.found THEN 'PENDING' ELSE 'DELIVERED' END, 0, now(), '', "
    "now(), NULL, NULL, CASE WHEN r.found THEN NULL ELSE now() END "
    "FROM unnest(%s::uuid[], %s::bigint[], %s::text[]) AS v(run_id, command_id, task), "
    "(SELECT EXISTS ({recipients}) AS found) r ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, status"
)


def _write(moves: list[_Move], rec: dict[str, Any], actor: Actor, executor: str) -> dict[int, Any]:
    """Every row but the history and the runs', in one round trip; the timers' fire times
    (the database clock's) are read back."""
    from workflows.engine import migration

    scope, version = str(rec["target_scope"]), int(rec["target_version"])
    run_ids = [str(m.run["id"]) for m in moves]
    statements: list[tuple[str, list[Any]]] = [
        (
            INSERT_COMMANDS,
            [
                executor,
                *actor.columns(),
                [m.command_id for m in moves],
                run_ids,
                [m.seq for m in moves],
                [
                    db.jsonb(
                        {
                            "version": version,
                            "scope": scope,
                            "step": m.item["target_node"] or None,
                            "action": "move",
                            "migration": int(rec["id"]),
                            "expected_step": m.item["source_node"],
                            "expected_version": int(rec["source_version"]),
                        }
                    )
                    for m in moves
                ],
            ],
        ),
        (
            CLOSE_PARKS,
            [
                version,
                scope,
                migration.actor_label(actor),
                int(rec["id"]),
                [int((m.run["wait"] or {}).get("park") or 0) for m in moves],
                [m.step.id for m in moves],
            ],
        ),
        (WITHDRAW_TASKS, [[str(t["id"]) for m in moves for t in m.withdrawn]]),
        (commands.CANCEL_TIMERS_BY_ID, [[int(t["id"]) for m in moves for t in m.disarmed]]),
        (
            OPEN_PARKS,
            [
                scope,
                rec["definition_id"],
                version,
                [m.park_id for m in moves],
                run_ids,
                [m.step.id for m in moves],
                ["TASK" if isinstance(m.step, p.HumanTaskStep) else "TIMER" for m in moves],
            ],
        ),
    ]
    tasks = [(m, m.opening) for m in moves if m.opening is not None]
    if tasks:
        statements.append(
            (
                OPEN_TASKS,
                [
                    [o.task_id for _, o in tasks],
                    [str(m.run["id"]) for m, _ in tasks],
                    [m.step.id for m, _ in tasks],
                    [o.title for _, o in tasks],
                    [o.description for _, o in tasks],
                    [getattr(m.step, "task_type", "") for m, _ in tasks],
                    [o.mode for _, o in tasks],
                    [o.value for _, o in tasks],
                    [db.jsonb(o.snapshot) for _, o in tasks],
                    [bool(getattr(m.step, "require_version_stability", False)) for m, _ in tasks],
                    [m.run["subject_version"] or "" for m, _ in tasks],
                    [getattr(m.step, "reminder_every_seconds", None) for m, _ in tasks],
                ],
            )
        )
    timers = [(m, t) for m in moves for t in m.timers]
    statements.append(
        (
            ARM_TIMERS,
            [
                [t["timer_id"] for _, t in timers],
                [t["command_id"] for _, t in timers],
                [str(m.run["id"]) for m, _ in timers],
                [t["timer_kind"] for _, t in timers],
                [t["step"] for _, t in timers],
                [t.get("task_id") for _, t in timers],
                [float(t.get("delay_seconds") or 0.0) for _, t in timers],
                [t.get("at") for _, t in timers],
                [t.get("interval_seconds") for _, t in timers],
                [t["seq"] for _, t in timers],
                [bool(t.get("due_task")) for _, t in timers],
                *TIMER.columns(),
            ],
        )
    )
    db.execute_batch(statements)
    for m in moves:  # the MIGRATION command and the TIMER commands of the timers it disarmed
        observers.settled_on_commit(
            m.run["id"],
            [(m.command_id, "MIGRATION", "COMPLETE")]
            + [(t["command_id"], "TIMER", "CANCELLED") for t in m.disarmed if t["command_id"]],
        )
    return {
        int(timer_id): at
        for timer_id, at in db.fetchall(
            "SELECT id, fire_at FROM workflow_timers WHERE id = ANY(%s)", [[t["timer_id"] for _, t in timers]]
        )
    }


def _save(moves: list[_Move]) -> None:
    """The decision log and the run rows of the batch (one statement each), then the notices
    of the approvals opened."""
    from workflows.engine import outbox

    rows: list[dict[str, Any]] = []
    saved: list[dict[str, Any]] = []
    for m in moves:
        drive = m.drive
        assert drive is not None
        r = drive.run
        for row in drive.history.flush_rows():
            row["run_id"] = str(r["id"])
            rows.append(row)
        saved.append(
            {
                "id": str(r["id"]),
                "status": r["status"],
                "current_step": r["current_step"],
                "wait": r["wait"],
                "next_seq": r["next_seq"],
                "history_seq": drive.history.next_seq - 1,
                "scope": r["scope"],
                "version": r["version"],
                "plan_hash": r["plan_hash"],
            }
        )
    db.execute_batch([(history.HISTORY_INSERT_MANY, [db.jsonb(rows)]), (SAVE_RUNS, [db.jsonb(saved)])])
    groups: dict[tuple[str, str], list[_Move]] = {}
    for m in moves:
        if m.opening is not None:
            groups.setdefault((m.opening.mode, m.opening.value), []).append(m)
    for (mode, value), group in groups.items():
        recipients, params = outbox.recipients_statement(mode, value)
        for intent_id, status in db.fetchall(
            NOTICES.format(recipients=recipients),
            [
                [str(m.run["id"]) for m in group],
                [m.command_id for m in group],
                [str(m.opening.task_id) for m in group if m.opening is not None],
                *params,
            ],
        ):
            if status != "DELIVERED":
                wakeups.deliver(int(intent_id))
