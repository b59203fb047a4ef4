"""``human-task``: open an approval with a decision snapshot, due date and reminders."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workflows.definitions.plan import Assignment, HumanTaskStep
from workflows.engine import db, outbox, pipeline, sql, timers, waits
from workflows.engine.context import Drive, step_failed
from workflows.engine.evaluate import bounded_text, evaluate, json_kind, render
from workflows.engine.nodes.base import WAIT, Outcome
from workflows.engine.nodes.timer import delay_of
from workflows.engine.outbox import digest
from workflows.models import ParkKind, TimerKind

SQL = sql.load("nodes")


def resolve_assignment(drive: Drive, assignment: Assignment, step: str) -> tuple[str, str]:
    mode, value = assignment.mode, assignment.value or ""
    if mode == "role":
        mode = "group"
    if mode == "expression":
        if assignment.expression is None:
            raise step_failed(step, "assignment.value", "the assignment has no expression")
        result: Any = evaluate(
            assignment.expression, {"state": drive.run["state"]}, step=step, field="assignment.value"
        )
        if isinstance(result, dict):
            mode, value = str(result.get("mode", "")), str(result.get("value", ""))
        elif isinstance(result, str) and ":" in result:
            mode, value = result.split(":", 1)
        else:
            raise step_failed(
                step, "assignment.value", f"must give 'user:NAME', 'group:NAME' or a map, gave {json_kind(result)}"
            )
        if mode == "role":
            mode = "group"
    if mode not in ("user", "group") or not value:
        raise step_failed(step, "assignment", "gave no assignee (the mode must be user, group or role, with a name)")
    return mode, value[:255]


@dataclass(frozen=True)
class Opening:
    """What opening a task takes from the run's state, computed before any write (a failing
    expression fails here, with nothing written)."""

    task_id: uuid.UUID
    mode: str
    value: str
    title: str
    description: str
    snapshot: list[dict[str, Any]]
    due: tuple[float, datetime | None] | None


def prepare(drive: Drive, step: HumanTaskStep) -> Opening:
    variables = {"state": drive.run["state"]}
    mode, value = resolve_assignment(drive, step.assignment, step.id)
    # rendered text is bounded (EXECUTOR.MAX_RENDERED_CHARS): past it the step fails at render
    # time, value-free, and nothing is written
    if step.title_template is not None:
        computed = str(evaluate(step.title_template, variables, step=step.id, field="title") or "")
        title = bounded_text(computed, step=step.id, field="title")[:500] or step.id
    else:
        title = render(step.title, variables, step=step.id, field="title")[:500] or step.id
    description = (
        bounded_text(
            str(evaluate(step.description_template, variables, step=step.id, field="description") or ""),
            step=step.id,
            field="description",
        )
        if step.description_template is not None
        else render(step.description, variables, step=step.id, field="description")
    )
    snapshot = [
        {"name": d.name, "label": d.label or d.name, "schema": dict(d.payload_schema) if d.payload_schema else None}
        for d in step.decisions
    ]
    due = delay_of(drive, step.due.delay, step.id, "due.at") if step.due is not None else None
    return Opening(uuid.uuid4(), mode, value, title, description, snapshot, due)


def task_params(drive: Drive, step: HumanTaskStep, o: Opening) -> list[Any]:
    """The parameters of ``SQL.insert_task`` for an opening."""
    run = drive.run
    return [
        o.task_id,
        run["id"],
        drive.branch_id,
        step.id,
        o.title,
        o.description,
        step.task_type,
        o.mode,
        o.value,
        db.jsonb(o.snapshot),
        step.require_version_stability,
        run["subject_version"] or "",
        step.reminder_every_seconds,
    ]


def timer_specs(step: HumanTaskStep, o: Opening) -> list[dict[str, Any]]:
    """The task's timers (``timers.statement`` arguments): its due date, its reminders."""
    specs: list[dict[str, Any]] = []
    if o.due is not None:
        specs.append(
            {
                "timer_kind": TimerKind.DUE,
                "step": step.id,
                "delay_seconds": o.due[0],
                "at": o.due[1],
                "task_id": o.task_id,
                "due_task": o.task_id,
            }
        )
    if step.reminder_every_seconds:
        specs.append(
            {
                "timer_kind": TimerKind.REMINDER,
                "step": step.id,
                "delay_seconds": step.reminder_every_seconds,
                "task_id": o.task_id,
                "interval_seconds": step.reminder_every_seconds,
            }
        )
    return specs


def opened(drive: Drive, step: HumanTaskStep, o: Opening, *, park_id: int, timers: list[dict[str, Any]]) -> None:
    """The task's park, row and timers are written: enter the wait and log the task."""
    wait = waits.enter(
        drive,
        step=step.id,
        kind="task",
        park_kind=ParkKind.TASK,
        outcome="wait-task",
        park_id=park_id,
        task=str(o.task_id),
    )
    for timer in timers:
        waits.timer_added(drive, wait, timer)
    drive.history.add(
        "TASK_CREATED",
        step=step.id,
        branch_id=drive.branch_id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"task": str(o.task_id), "assignment": {"mode": o.mode, "value": o.value}},
    )


def execute(drive: Drive, step: HumanTaskStep) -> Outcome:
    o = prepare(drive, step)  # may fail: before any write
    specs = timer_specs(step, o)
    if digest.kept(drive.moved, o.mode, o.value):
        # a migration reopened the approval for the assignees it took one from: no "New task"
        digest.record_kept(drive, mode=o.mode, value=o.value)
        notice, notice_context = None, None
    else:
        notice, notice_context = outbox.notice_statement(
            drive, task_id=o.task_id, reason="opened", assignment=(o.mode, o.value)
        )
    park_id = waits.drawn_park_id() if not specs and pipeline.deferring_now() else None
    if park_id is not None:
        # nothing before the commit needs an answer (the park's id was drawn ahead, and a task
        # without timers has no timer rows to list): the park, the task and its notice travel
        # with the segment's next statement, its settlement as a rule
        pipeline.defer(
            *waits.park_statement(drive, node=step.id, kind=ParkKind.TASK, branch_id=drive.branch_id, park_id=park_id),
            pipeline.ignore_answer,
        )
        pipeline.defer(SQL.insert_task, task_params(drive, step, o), pipeline.ignore_answer)

        if notice is not None:

            def recorded(row: tuple[Any, ...] | None) -> None:
                outbox.notice_recorded(drive, row, notice_context)

            pipeline.defer(*notice, recorded)
        opened(drive, step, o, park_id=park_id, timers=[])
        return WAIT
    # one round trip: the park, the task (before its timers, which reference it), its due date
    # and reminder timers, and its notice (delivered at once when nobody can receive it); and,
    # when this process has no park ids drawn ahead, the next block of them
    statements = [
        waits.park_statement(drive, node=step.id, kind=ParkKind.TASK, branch_id=drive.branch_id),
        (SQL.insert_task, task_params(drive, step, o)),
    ]
    positions: list[int] = []  # the queue position each timer statement took
    for spec in specs:
        sql, params, seq = timers.statement(drive.run, branch_id=drive.branch_id, **spec)
        statements.append((sql, params))
        positions.append(seq)
    if notice is not None:
        statements.append(notice)
    draw = waits.draw_statement() if not specs else None
    if draw is not None:
        statements.append(draw)
    rows = pipeline.fetch_batch(statements)
    if draw is not None:
        waits.drawn(rows.pop())
    park = rows[0]
    assert park is not None
    opened(
        drive,
        step,
        o,
        park_id=int(park[0]),
        timers=[timers.armed(row, seq) for row, seq in zip(rows[2 : 2 + len(positions)], positions, strict=True)],
    )
    if notice is not None:
        outbox.notice_recorded(drive, rows[-1], notice_context)
    return WAIT
