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
(``handler.apply_migration``): each run's entries are built by the same code (a ``Drive``
per run, the human-task node's ``prepare``/``opened``), only the writes are gathered. A run
this path does not cover — a call or join wait, parked signals, a registered state handler,
a state the target's schema refuses, a target node of another type, active branches, a target
revision not available, an expression that fails for that run — gets a MIGRATION command as
before, and its segment applies (or rejects) it with the full checks. Statements:
``engine/sql/migration_bulk.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workflows.definitions import plan as p
from workflows.definitions.plan import Plan
from workflows.engine import commands, db, history, observers, pipeline, settlement, sql, timers, waits, wakeups
from workflows.engine.actors import Actor
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.migration.handler import actor_label, handler_for, origin_of, parked_at
from workflows.engine.nodes import human_task
from workflows.engine.nodes.timer import delay_of
from workflows.engine.rows import CommandRef, RunRow
from workflows.exceptions import WorkflowError
from workflows.models import (
    CommandKind,
    CommandStatus,
    MigrationItemStatus,
    OutboxIntent,
    ParkKind,
    RunStatus,
    TimerKind,
)

SQL = sql.load("migration_bulk")

WAITS = ("task", "timer", "signal")  # the waits a run is moved away from here


@dataclass
class _Move:
    item: dict[str, Any]
    run: RunRow
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
    rec: dict[str, Any], chosen: list[tuple[dict[str, Any], RunRow]], actor: Actor
) -> tuple[list[tuple[int, str, str, int | None]], list[tuple[dict[str, Any], RunRow]]]:
    """Move what can be moved set-based; answers the items' outcomes (MOVED with the command)
    and the (item, run) pairs left for MIGRATION commands."""
    from workflows.definitions import cache, schemas
    from workflows.engine import executor

    moves = [(item, run) for item, run in chosen if item["action"] == "move"]
    if not moves:
        return [], chosen
    scope, version = str(rec["target_scope"]), int(rec["target_version"])
    try:
        source = cache.get_plan(scope=rec["scope"], definition_id=rec["definition_id"], version=rec["source_version"])
        target = cache.get_plan(scope=scope, definition_id=rec["definition_id"], version=version)
    except WorkflowError:
        return [], chosen
    if target.contract.name != source.contract.name or handler_for(
        rec["definition_id"], int(rec["source_version"]), version
    ):
        return [], chosen
    available = db.fetchone(
        SQL.target_available,
        [scope, rec["definition_id"], version],
    )
    if available is None:
        return [], chosen
    ids = [str(run["id"]) for _, run in moves]
    busy = {str(r[0]) for r in db.fetchall(SQL.busy_runs, [ids, ids])}
    eligible: list[_Move] = []
    for item, run in moves:
        step = target.steps.get(str(item["target_node"] or parked_at(run)))
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
    _save(eligible, rec)
    moved = {id(m.item) for m in eligible}
    outcomes: list[tuple[int, str, str, int | None]] = [
        (int(m.item["id"]), MigrationItemStatus.MOVED, "", m.command_id) for m in eligible
    ]
    return outcomes, [(item, run) for item, run in chosen if id(item) not in moved]


def _prepare(moves: list[_Move], source: Plan, actor: Actor) -> None:
    """Per run, what entering the target node takes from its state; a run whose expressions
    fail is left for its MIGRATION segment (which rejects it with the framework's text)."""
    from workflows.engine import executor

    pointers: dict[Any, Any] = {}  # the redactors are asked once per revision for the batch
    for m in moves:
        run = m.run.copy()
        drive = Drive.for_run(
            run, source, actor, command_kind=CommandKind.MIGRATION, executor_id=executor.executor_id()
        )
        drive.history._pointers = pointers
        try:
            if isinstance(m.step, p.HumanTaskStep):
                m.opening = human_task.prepare(drive, m.step)
                m.timers = [dict(spec) for spec in human_task.timer_specs(m.step, m.opening)]
            else:
                m.delay = delay_of(drive, m.step.delay, m.step.id)
                m.timers = [
                    {"timer_kind": TimerKind.FIRE, "step": m.step.id, "delay_seconds": m.delay[0], "at": m.delay[1]}
                ]
        except (DeterministicFailure, WorkflowError):
            continue
        m.drive = drive


def _allocate(moves: list[_Move]) -> None:
    timer_count = sum(len(m.timers) for m in moves)
    row = db.fetchone(SQL.allocate_ids, [len(moves) + timer_count, len(moves), timer_count])
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
        SQL.leaving_tasks,
        [list(by_run)],
    ):
        by_run[str(row["run_id"])].withdrawn.append(row)
    timer_ids = [int(t) for m in moves for t in (m.run["wait"] or {}).get("timers", [])]
    if timer_ids:
        for row in db.fetchdicts(
            SQL.leaving_timers,
            [timer_ids],
        ):
            by_run[str(row["run_id"])].disarmed.append(row)


def _build(moves: list[_Move], rec: dict[str, Any], target: Plan, actor: Actor, fire_at: dict[int, Any]) -> None:
    """Each run's history and row, built by the segment's own code in the segment's order."""
    for m in moves:
        drive = m.drive
        assert drive is not None
        run = drive.run
        drive.command_id = m.command_id
        drive.history._command_documents[m.command_id] = [None]  # a MIGRATION carries no payload
        cmd: CommandRef = {"id": m.command_id, "kind": CommandKind.MIGRATION, "seq": m.seq}
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
        origin = origin_of(run)
        run["wait"], run["status"] = None, RunStatus.RUNNING
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
                drive, step=step.id, kind="timer", park_kind=ParkKind.TIMER, outcome="wait-timer", park_id=m.park_id
            )
            waits.timer_added(drive, wait, armed[0])
            wait["fire"] = armed[0]["timer_id"]
        settlement.completed(drive, cmd)


def _write(moves: list[_Move], rec: dict[str, Any], actor: Actor, executor: str) -> dict[int, Any]:
    """Every row but the history and the runs', in one round trip; the timers' fire times
    (the database clock's) are read back."""
    scope, version = str(rec["target_scope"]), int(rec["target_version"])
    run_ids = [str(m.run["id"]) for m in moves]
    statements: list[tuple[str, list[Any]]] = [
        (
            SQL.insert_commands,
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
            SQL.close_parks,
            [
                version,
                scope,
                actor_label(actor),
                int(rec["id"]),
                [int((m.run["wait"] or {}).get("park") or 0) for m in moves],
                [m.step.id for m in moves],
            ],
        ),
        (SQL.withdraw_tasks, [[str(t["id"]) for m in moves for t in m.withdrawn]]),
        (commands.SQL.cancel_timers_by_id, [[int(t["id"]) for m in moves for t in m.disarmed]]),
        (
            SQL.open_parks,
            [
                scope,
                rec["definition_id"],
                version,
                [m.park_id for m in moves],
                run_ids,
                [m.step.id for m in moves],
                [ParkKind.TASK if isinstance(m.step, p.HumanTaskStep) else ParkKind.TIMER for m in moves],
            ],
        ),
    ]
    tasks = [(m, m.opening) for m in moves if m.opening is not None]
    if tasks:
        statements.append(
            (
                SQL.open_tasks,
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
    armed = [(m.run["id"], t) for m in moves for t in m.timers]
    statements.append(timers.arm_many_statement(armed))
    pipeline.execute_batch(statements)
    for m in moves:  # the MIGRATION command and the TIMER commands of the timers it disarmed
        observers.settled_on_commit(
            m.run["id"],
            [(m.command_id, CommandKind.MIGRATION, CommandStatus.COMPLETE)]
            + [(t["command_id"], CommandKind.TIMER, CommandStatus.CANCELLED) for t in m.disarmed if t["command_id"]],
        )
    return {int(timer_id): at for timer_id, at in db.fetchall(SQL.fire_times, [[t["timer_id"] for _, t in armed]])}


def _save(moves: list[_Move], rec: dict[str, Any]) -> None:
    """The decision log and the run rows of the batch (one statement each), then the notices
    of the approvals opened for new assignees (one statement per assignee) and, when the
    migration asked for them, the digests of those reopened for the same ones (``digest``)."""
    from workflows.engine import outbox
    from workflows.engine.outbox import digest

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
    pipeline.execute_batch([(history.HISTORY_INSERT_MANY, [db.jsonb(rows)]), (SQL.save_runs, [db.jsonb(saved)])])
    groups: dict[tuple[str, str], list[_Move]] = {}
    kept: dict[tuple[str, str], list[_Move]] = {}  # reopened for the assignees it was taken from
    for m in moves:
        if m.opening is not None:
            who = (m.opening.mode, m.opening.value)
            (kept if who in digest.assignees(m.withdrawn) else groups).setdefault(who, []).append(m)
    if kept and digest.wanted(int(rec["id"])):
        moved = digest.moved(
            [],
            digest=True,
            migration_id=int(rec["id"]),
            definition_id=rec["definition_id"],
            version=int(rec["target_version"]),
        )
        pipeline.execute_batch(
            [
                digest.statement(
                    moved,
                    run_id=group[0].run["id"],
                    command_id=group[0].command_id,
                    mode=mode,
                    value=value,
                    count=len(group),
                )
                for (mode, value), group in kept.items()
            ]
        )
    for (mode, value), group in groups.items():
        recipients, params = outbox.recipients_statement(mode, value)
        for intent_id, status in db.fetchall(
            SQL.notices.format(recipients=recipients),
            [
                [str(m.run["id"]) for m in group],
                [m.command_id for m in group],
                [str(m.opening.task_id) for m in group if m.opening is not None],
                *params,
            ],
        ):
            if status != OutboxIntent.Status.DELIVERED:
                wakeups.deliver(int(intent_id))
