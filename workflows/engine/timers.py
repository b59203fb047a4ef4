"""Timers, in one place: arming, re-arming, firing, branch timers and the signal-versus-timeout
deadline rule.

A timer is a ``workflow_timers`` row and the TIMER command that fires it, inserted together
(``arm``); the command runs as an ordinary segment at the fire time (``apply``). FIRE (a
``timer`` step), TIMEOUT (a signal wait's), DUE (an approval's due date) leave the wait and
drive the run on; REMINDER notifies the assignee again and re-arms itself. A timer of a
branch fires inside that branch. A run retried after it failed while it waited gets the
failed timers of its wait back with their original fire times (``rearm_failed``).
Cancelling timers is the queue's (``commands.cancel_timers``): leaving a wait settles them.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from workflows.definitions import plan as p
from workflows.engine import commands, db, outbox, sql, waits, wakeups
from workflows.engine.actors import TIMER
from workflows.engine.context import Drive
from workflows.engine.evaluate import apply_set
from workflows.engine.nodes.base import WAIT
from workflows.engine.rows import CommandRow, RunQueue, RunRow, WaitRow
from workflows.engine.settlement import REQUEUE, Settle, completed, received
from workflows.models import BranchStatus, CommandKind, CommandStatus, RunStatus, TaskStatus, Timer, TimerKind

SQL = sql.load("timers")


# --- arming ------------------------------------------------------------------------------


def statement(
    run: RunQueue,
    *,
    timer_kind: str,
    step: str,
    delay_seconds: float = 0.0,
    at: datetime.datetime | None = None,
    branch_id: str = "",
    task_id: UUID | str | None = None,
    target: dict[str, Any] | None = None,
    interval_seconds: float | None = None,
    due_task: UUID | str | None = None,
) -> tuple[str, list[Any], int]:
    """A timer row and its TIMER command (``SQL.arm``): the statement, and the queue position it
    takes (counted on ``run`` now), for ``insert`` or a caller that batches it. ``due_task``
    also sets that task's due date to the fire time."""
    seq = commands.next_seq(run)
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
    return SQL.arm, params, seq


def arm_many_statement(armed: Sequence[tuple[Any, dict[str, Any]]]) -> tuple[str, list[Any]]:
    """The arming of many timers in one statement (a bulk migration): ``(run id, timer)`` pairs
    whose ``timer_id`` and ``command_id`` were drawn before, each timer with ``timer_kind``,
    ``step``, ``seq`` and optionally ``task_id``, ``delay_seconds``, ``at``,
    ``interval_seconds`` and ``due_task``; the rows are those ``statement`` writes for one."""
    return SQL.arm_many, [
        [t["timer_id"] for _, t in armed],
        [t["command_id"] for _, t in armed],
        [str(run_id) for run_id, _ in armed],
        [t["timer_kind"] for _, t in armed],
        [t["step"] for _, t in armed],
        [t.get("task_id") for _, t in armed],
        [float(t.get("delay_seconds") or 0.0) for _, t in armed],
        [t.get("at") for _, t in armed],
        [t.get("interval_seconds") for _, t in armed],
        [t["seq"] for _, t in armed],
        [bool(t.get("due_task")) for _, t in armed],
        *TIMER.columns(),
    ]


def armed(row: tuple[Any, ...] | None, seq: int) -> dict[str, Any]:
    """What ``insert`` answers, from the row its statement returned."""
    assert row is not None
    return {"id": row[0], "timer_id": row[1], "fire_at": row[2], "seq": seq}


def insert(run: RunQueue, **spec: Any) -> dict[str, Any]:
    """A timer row and the TIMER command that fires it, inserted together in one statement
    (logged as SYSTEM; ``statement`` names the fields)."""
    sql_text, params, seq = statement(run, **spec)
    return armed(db.fetchone(sql_text, params, prepared=True), seq)


def arm(drive: Drive, wait: WaitRow, **spec: Any) -> dict[str, Any]:
    """A timer of the wait being entered (in the drive's branch, if any): inserted, listed on
    the wait, and a wake-up asked for its fire time."""
    spec.setdefault("branch_id", drive.branch_id)
    return waits.timer_added(drive, wait, insert(drive.run, **spec))


def rearm(run: RunRow, timer: dict[str, Any]) -> dict[str, Any]:
    """A new TIMER command for an existing timer row, keeping its original fire time."""
    seq = commands.next_seq(run)
    target = {"step": timer["step"], "timer": timer["id"]}
    if timer.get("branch_id"):
        target["branch"] = timer["branch_id"]
    row = db.fetchone(
        commands.SQL.insert_at,
        [
            run["id"],
            seq,
            CommandKind.TIMER,
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
    db.execute(SQL.rearmed, [row[0], timer["id"]])
    return {"id": row[0], "seq": seq, "fire_at": timer["fire_at"]}


def rearm_failed(run: RunRow) -> None:
    """A run that failed while it waited returns to that wait: its failed timers, once more."""
    for timer in db.fetchdicts(SQL.to_rearm, [run["id"]]):
        rearm(run, timer)


# --- the deadline rule ---------------------------------------------------------------------


def deadline_blocked(run_id: Any, wait: WaitRow | None, recorded_at: Any) -> bool:
    """A signal recorded at or after its wait's timeout fire time never applies there while
    the timeout is pending, deferred, claimed or dead-lettered (or already fired)."""
    timer_id = wait.get("timeout") if wait else None
    if not timer_id:
        return False
    return db.fetchone(SQL.deadline_blocked, [timer_id, recorded_at]) is not None


# --- firing ----------------------------------------------------------------------------------


def apply(drive: Drive, cmd: CommandRow) -> Settle:
    """A TIMER command's segment: fire its timer at the run's wait, or at its branch's."""
    timer = db.fetchdict(SQL.lock, [cmd["timer_id"]])
    if timer is None or timer["status"] != Timer.Status.SCHEDULED or timer["command_id"] != cmd["id"]:
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="TIMER_NOT_SCHEDULED")
        return Settle(CommandStatus.STALE, "TIMER_NOT_SCHEDULED: the timer is no longer scheduled")
    # a true cycle: firing drives the run on through the nodes, and the nodes arm timers
    from workflows.engine import driver

    if timer["branch_id"]:
        return _fire_in_branch(drive, cmd, timer)
    settle = fire(drive, cmd, timer)
    if settle.status == CommandStatus.COMPLETE:
        driver.after_drive(drive, drive.last_outcome)
    return settle


def _fire_in_branch(drive: Drive, cmd: CommandRow, timer: dict[str, Any]) -> Settle:
    from workflows.engine import driver, forks

    branch = forks.find_branch(drive, timer["branch_id"])
    if branch is None or branch["status"] != BranchStatus.WAITING:
        db.execute(SQL.stale, [timer["id"]])
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="BRANCH_ENDED")
        return Settle(CommandStatus.STALE, "BRANCH_ENDED: the timer's branch is no longer waiting")
    result: dict[str, Any] = {}

    def body() -> Any:
        settle = fire(drive, cmd, timer)
        result["settle"] = settle
        return result.get("outcome", WAIT) if settle.status != CommandStatus.COMPLETE else drive.last_outcome

    outcome = forks.continue_in_branch(drive, branch, body)
    settle: Settle = result["settle"]
    if settle.status != CommandStatus.COMPLETE:
        return settle
    driver.after_drive(drive, outcome)
    return settle


def fire(drive: Drive, cmd: CommandRow, timer: dict[str, Any]) -> Settle:
    """Fire a timer at the (swapped-in) wait; the outcome of the drive is left in
    ``drive.last_outcome`` so the caller can apply parked signals or decide a join."""
    from workflows.engine import driver

    plan = drive.plan
    assert plan is not None
    wait = drive.run["wait"] or {}
    drive.last_outcome = None

    def stale(reason: str) -> Settle:
        if timer["status"] == Timer.Status.SCHEDULED:
            db.execute(SQL.stale, [timer["id"]])
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome=reason.split(":")[0])
        return Settle(CommandStatus.STALE, reason)

    kind = timer["kind"]
    step = plan.steps.get(timer["step"])
    if kind == TimerKind.REMINDER:
        return _remind(drive, cmd, timer, stale)
    if drive.run["status"] != RunStatus.WAITING or wait.get("step") != timer["step"]:
        return stale("WAIT_LEFT: the run has left the wait")
    if kind == TimerKind.DUE and _task_completing(timer):
        return Settle(REQUEUE)  # held back behind the completion; keeps its place and fire time
    received(drive, cmd)
    if kind == TimerKind.FIRE:
        if wait.get("fire") != timer["id"] or not isinstance(step, p.TimerStep):
            return stale("WAIT_LEFT: the run has left the wait")
        _fired(timer)
        drive.history.add("TIMER_FIRED", step=step.id, command_id=cmd["id"], actor=drive.actor)
        waits.leave(drive, "timer", keep_timer=timer["id"])
        state = drive.run["state"]
        new_state = apply_set(step.set, state, {"state": state}, step=step.id, field="set")
        drive.count_step()
        drive.decide(step=step.id, outcome="timer-fired", new_state=new_state, change=step.set is not None)
        outcome = driver.run_from(drive, step.next or "")
    elif kind == TimerKind.TIMEOUT:
        if wait.get("timeout") != timer["id"] or not isinstance(step, p.WaitSignalStep) or step.timeout is None:
            return stale("WAIT_LEFT: the run has left the wait")
        _fired(timer)
        drive.history.add("TIMEOUT", step=step.id, command_id=cmd["id"], actor=drive.actor)
        waits.leave(drive, "timer", keep_timer=timer["id"])
        state = drive.run["state"]
        new_state = apply_set(step.timeout.set, state, {"state": state}, step=step.id, field="timeout.set")
        drive.count_step()
        drive.decide(step=step.id, outcome="timeout", new_state=new_state, change=step.timeout.set is not None)
        outcome = driver.run_from(drive, step.timeout.next)
    elif kind == TimerKind.DUE:
        task = db.fetchdict(SQL.lock_task, [timer["task_id"]])
        if (
            task is None
            or task["status"] != TaskStatus.OPEN
            or wait.get("task") != str(task["id"])
            or not isinstance(step, p.HumanTaskStep)
            or step.due is None
        ):
            return stale("TASK_NOT_OPEN: the task is no longer open")
        _fired(timer)
        db.execute(SQL.expire_task, [task["id"]])
        drive.history.add(
            "TASK_EXPIRED", step=step.id, command_id=cmd["id"], actor=drive.actor, payload={"task": str(task["id"])}
        )
        waits.leave(drive, "timer", keep_timer=timer["id"])
        state = drive.run["state"]
        new_state = apply_set(step.due.set, state, {"state": state}, step=step.id, field="due.set")
        drive.count_step()
        drive.decide(step=step.id, outcome="task-expired", new_state=new_state, change=step.due.set is not None)
        outcome = driver.run_from(drive, step.due.next)
    else:
        return stale("UNKNOWN_TIMER: the timer kind is unknown")
    drive.last_outcome = outcome
    return completed(drive, cmd)


def _task_completing(timer: dict[str, Any]) -> bool:
    row = db.fetchone(SQL.task_status, [timer["task_id"]])
    return row is not None and row[0] == TaskStatus.COMPLETING


def _fired(timer: dict[str, Any]) -> None:
    db.execute(SQL.fired, [timer["id"]])


def _remind(drive: Drive, cmd: CommandRow, timer: dict[str, Any], stale: Callable[[str], Settle]) -> Settle:
    task = db.fetchdict(SQL.lock_reminded_task, [timer["task_id"]])
    if task is not None and task["status"] == TaskStatus.COMPLETING:
        return Settle(REQUEUE)  # held back behind the completion; keeps its place and fire time
    if task is None or task["status"] != TaskStatus.OPEN:
        return stale("TASK_NOT_OPEN: the task is no longer open")
    received(drive, cmd)
    _fired(timer)
    row = db.fetchone(SQL.count_reminder, [task["id"]])
    count = int(row[0]) if row else 0
    drive.history.add(
        "TASK_REMINDER_FIRED",
        step=task["step"],
        command_id=cmd["id"],
        actor=drive.actor,
        payload={"task": str(task["id"]), "count": count},
    )
    outbox.notify_task(
        drive,
        task_id=task["id"],
        reason="reminder",
        seq=count,
        assignment=(task["assignment_mode"], task["assignment_value"]),
    )
    if timer["interval_seconds"]:
        # anchored at the previous scheduled fire, not at when this segment ran
        nxt = insert(
            drive.run,
            timer_kind=TimerKind.REMINDER,
            step=timer["step"],
            delay_seconds=0.0,
            at=timer["fire_at"] + datetime.timedelta(seconds=float(timer["interval_seconds"])),
            task_id=task["id"],
            branch_id=timer["branch_id"] or "",
            interval_seconds=timer["interval_seconds"],
        )
        wait = drive.run.get("wait")
        if wait and wait.get("task") == str(task["id"]):
            timers = [t for t in wait.get("timers", []) if t != timer["id"]]
            timers.append(nxt["timer_id"])
            wait["timers"] = timers
        wakeups.wake(drive.run["id"], nxt["fire_at"])
    return completed(drive, cmd)
