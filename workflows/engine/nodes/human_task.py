"""``human-task``: open an approval with a decision snapshot, due date and reminders."""

from __future__ import annotations

import uuid
from typing import Any

from workflows.definitions.plan import Assignment, HumanTaskStep
from workflows.engine import commands, db, outbox, waits
from workflows.engine.drive import DeterministicFailure, Drive
from workflows.engine.evaluate import evaluate, render
from workflows.engine.nodes.base import WAIT, Outcome
from workflows.engine.nodes.timer import delay_of


def resolve_assignment(drive: Drive, assignment: Assignment, step: str) -> tuple[str, str]:
    mode, value = assignment.mode, assignment.value or ""
    if mode == "role":
        mode = "group"
    if mode == "expression":
        if assignment.expression is None:
            raise DeterministicFailure(f"DETERMINISTIC_FAILURE: assignment of step {step} has no expression")
        result: Any = evaluate(assignment.expression, {"state": drive.run["state"]}, step=step, field="assignment")
        if isinstance(result, dict):
            mode, value = str(result.get("mode", "")), str(result.get("value", ""))
        elif isinstance(result, str) and ":" in result:
            mode, value = result.split(":", 1)
        else:
            raise DeterministicFailure(f"DETERMINISTIC_FAILURE: assignment of step {step} gave no assignee")
        if mode == "role":
            mode = "group"
    if mode not in ("user", "group") or not value:
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: assignment of step {step} gave no assignee")
    return mode, value[:255]


def execute(drive: Drive, step: HumanTaskStep) -> Outcome:
    run = drive.run
    variables = {"state": run["state"]}
    mode, value = resolve_assignment(drive, step.assignment, step.id)
    if step.title_template is not None:
        title = str(evaluate(step.title_template, variables, step=step.id, field="title") or "")[:500] or step.id
    else:
        title = render(step.title, variables)[:500] or step.id
    description = (
        str(evaluate(step.description_template, variables, step=step.id, field="description") or "")
        if step.description_template is not None
        else render(step.description, variables)
    )
    snapshot = [
        {"name": d.name, "label": d.label or d.name, "schema": dict(d.payload_schema) if d.payload_schema else None}
        for d in step.decisions
    ]
    task_id = uuid.uuid4()
    due = delay_of(drive, step.due.delay, step.id) if step.due is not None else None  # may fail: before any write
    # one round trip: the park, the task (before its timers, which reference it), its due date
    # and reminder timers, and its notice (delivered at once when nobody can receive it)
    statements = [
        waits.park_statement(drive, node=step.id, kind="TASK", branch_id=drive.branch_id),
        (
            INSERT_TASK,
            [
                task_id,
                run["id"],
                drive.branch_id,
                step.id,
                title,
                description,
                step.task_type,
                mode,
                value,
                db.jsonb(snapshot),
                step.require_version_stability,
                run["subject_version"] or "",
                step.reminder_every_seconds,
            ],
        ),
    ]
    timers: list[int] = []  # the queue position each timer statement took
    if due is not None:
        sql, params, seq = commands.timer_statement(
            run,
            timer_kind="DUE",
            step=step.id,
            delay_seconds=due[0],
            at=due[1],
            branch_id=drive.branch_id,
            task_id=task_id,
            due_task=task_id,
        )
        statements.append((sql, params))
        timers.append(seq)
    if step.reminder_every_seconds:
        sql, params, seq = commands.timer_statement(
            run,
            timer_kind="REMINDER",
            step=step.id,
            delay_seconds=step.reminder_every_seconds,
            branch_id=drive.branch_id,
            task_id=task_id,
            interval_seconds=step.reminder_every_seconds,
        )
        statements.append((sql, params))
        timers.append(seq)
    notice, notice_context = outbox.notice_statement(drive, task_id=task_id, reason="opened", assignment=(mode, value))
    statements.append(notice)
    rows = db.fetch_batch(statements)
    park = rows[0]
    assert park is not None
    wait = waits.enter(
        drive, step=step.id, kind="task", park_kind="TASK", outcome="wait-task", park_id=int(park[0]), task=str(task_id)
    )
    for row, seq in zip(rows[2 : 2 + len(timers)], timers, strict=True):
        waits.timer_added(drive, wait, commands.timer_row(row, seq))
    drive.history.add(
        "TASK_CREATED",
        step=step.id,
        branch_id=drive.branch_id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"task": str(task_id), "assignment": {"mode": mode, "value": value}},
    )
    outbox.notice_recorded(drive, rows[-1], notice_context)
    return WAIT


INSERT_TASK = (
    "INSERT INTO workflow_tasks (id, run_id, branch_id, step, title, description, task_type, assignment_mode, "
    "assignment_value, status, decisions, require_version_stability, subject_version, due_at, "
    "reminder_every_seconds, reminder_count, reservation_owner, decision, completed_by, created_at, updated_at) "
    "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,'OPEN',%s,%s,%s,NULL,%s,0,NULL,'','',now(),now())"
)
