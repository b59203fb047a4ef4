"""One segment: a claimed command applied in one transaction.

try-lock the run → fence the claim (still CLAIMED with our token) → apply the command by
kind (``APPLY``: START, SIGNAL, COMPLETION and RETRY here; TIMER in ``timers``, RESUME in
``calls``, MIGRATION in ``migration``; branch-addressed work in ``forks``, all imported
directly) → history → complete the command (0 rows updated = the claim no longer stands, and
everything rolls back together).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple

from django.db import transaction

from workflows import conf
from workflows.definitions import expressions
from workflows.definitions.plan import Plan
from workflows.engine import (
    calls,
    db,
    decisions,
    driver,
    faults,
    forks,
    locks,
    migration,
    observers,
    outcomes,
    pipeline,
    sql,
    timers,
    wakeups,
)
from workflows.engine.actors import Actor
from workflows.engine.context import (
    DeterministicFailure,
    Drive,
    InitialisationFailed,
    RedoWithSavepoints,
    StepLimitExceeded,
)
from workflows.engine.evaluate import evaluate
from workflows.engine.nodes.base import WAIT
from workflows.engine.rows import CommandRow, RunRow
from workflows.engine.settlement import (
    REQUEUE,
    Settle,
    actor_of,
    completed,
    failure_detail,
    failure_reason,
    named,
    received,
    reopen,
)
from workflows.exceptions import ExpressionFailed
from workflows.models import ENDED_STATUSES, CommandKind, CommandStatus, RunStatus, TaskStatus

Busy = locks.Busy  # the run's execution lock, or a called run's, is held by another transaction


class Fenced(Exception):
    """The claim no longer stands (settled, cancelled or re-claimed by another executor)."""


SQL = sql.load("segment")


def run(
    *,
    command_id: int,
    run_id: Any,
    token: Any,
    plan: Plan | None,
    executor_id: str,
    deadline: float,
    max_steps: int,
    kind: str = "",
    opening: Opening | None = None,
) -> Settle:
    """Apply a claimed command in one transaction. Raises Busy/Fenced/DeadlineExceeded or the failure.
    ``kind`` (the claimed head's) lets a COMPLETION read its task with the lock.

    ``opening`` (the executor's claim travelling with the lock, see ``locks.claim_and_lock``)
    replaces the first statement: given the milliseconds left, it answers the locked run (None:
    busy), the command holding ``token`` (None: fenced) and its plan; ``command_id``, ``plan``
    and ``kind`` are then taken from what it found.

    The first attempt takes no savepoints (``Drive.optimistic``); when something escapes one,
    the transaction rolls back whole and the segment runs again with them."""
    claim = _Claim(command_id, run_id, token, plan, executor_id, deadline, max_steps, kind)
    opened: list[_Claim] = []
    # the segment's expressions share one CPU allowance (a third of the lease at most) and must
    # be done within half the lease by the clock (a loaded machine stretches CPU time): a plan
    # looping through costly expressions, or over a large state, fails deterministically on its
    # first attempt instead of outliving its lease and being claimed again
    lease = conf.get().EXECUTOR.LEASE_SECONDS
    allowance = min(expressions.MAX_SEGMENT_EVALUATION_CPU_MS / 1000, lease / 3)
    try:
        with expressions.evaluation_allowance(allowance, lease / 2):
            return _run(claim, optimistic=True, opening=opening, opened=opened)
    except RedoWithSavepoints:
        with expressions.evaluation_allowance(allowance, lease / 2):
            return _run(opened[0] if opened else claim, optimistic=False)


# (milliseconds left) -> (the locked run or None, the command or None, its plan)
Opening = Callable[[int], tuple[RunRow | None, CommandRow | None, Plan | None]]


class _Claim(NamedTuple):
    command_id: int
    run_id: Any
    token: Any
    plan: Plan | None
    executor_id: str
    deadline: float
    max_steps: int
    kind: str


def _run(
    claim: _Claim, *, optimistic: bool, opening: Opening | None = None, opened: list[_Claim] | None = None
) -> Settle:
    command_id, run_id, token, plan, executor_id, deadline, max_steps, kind = claim
    with transaction.atomic():
        # one statement: the execution lock (first, so a busy lock aborts an empty
        # transaction), the fence on our claim, and the segment's statement deadline
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        if opening is not None:
            run_row, cmd, plan = opening(remaining_ms)
        else:
            run_row, cmd = locks.try_lock_run_with_command(
                run_id, command_id, token, remaining_ms, with_task=kind == CommandKind.COMPLETION
            )
        if run_row is None:
            raise Busy()
        if cmd is None:
            raise Fenced()
        if opening is not None:
            command_id, kind = cmd["id"], cmd["kind"]
            if opened is not None:
                opened.append(claim._replace(command_id=command_id, plan=plan, kind=kind))
        segment_log = faults.segment_started(run_id, command_id, token, executor_id)
        actor = actor_of(cmd)
        drive = Drive.for_run(
            run_row,
            plan,
            actor,
            command_id=command_id,
            command_kind=cmd["kind"],
            executor_id=executor_id,
            max_steps=max_steps,
            deadline=deadline,
            token=token,
        )
        drive.optimistic = optimistic
        if cmd.get("reconcile_action") == "resolve":
            drive.resolved_effect = (
                (cmd["target"] or {}).get("resolved_step", "") if cmd["kind"] != CommandKind.SIGNAL else ""
            )
        # without savepoints, writes nobody reads before the commit (outbox intents) travel
        # with the segment's next statement (``pipeline.defer``); with savepoints each is sent at once
        with pipeline.deferring() if optimistic else nullcontext():
            settle = apply(drive, cmd)
            faults.point("before_settle")
            faults.segment_settling(segment_log, command_id, token, settle.status)
            # the settlement, the history, the run row and the commit in one round trip; a
            # settlement that updates no row (the claim no longer stands) rolls everything back
            if not drive.save_and_commit(settlement(drive, cmd, settle)):
                raise Fenced()
        settle.more = bool(cmd.get("_more"))
        return settle


def settlement(drive: Drive, cmd: CommandRow, settle: Settle) -> tuple[str, list[Any]]:
    """The executing command's settlement, fenced on its token."""
    if settle.status == REQUEUE:
        # a due date or reminder that met a COMPLETING task: back in the queue, attempt restored
        return SQL.requeue, [cmd["id"], drive.token]
    if settle.status == CommandStatus.PARKED:
        return SQL.park, [cmd["id"], drive.token]
    return SQL.settle, [settle.status, settle.reason, cmd["id"], drive.token]


def apply(drive: Drive, cmd: CommandRow) -> Settle:
    decision = outcome_of(drive.run, cmd)
    if decision != outcomes.EXECUTE:
        return settle_by_outcome(drive, cmd, decision)
    handler = APPLY[cmd["kind"]]
    return handler(drive, cmd)


def _branch_ended(run_id: Any, branch_id: str) -> bool:
    """Whether the addressed branch (its latest generation) has ended, or never existed."""
    row = db.fetchone(SQL.branch_status, [run_id, branch_id])
    return row is None or row[0] in forks.BRANCH_ENDED


def outcome_of(run: RunRow, cmd: CommandRow) -> str:
    """What becomes of ``cmd`` on this (locked) run: the outcome table (``outcomes.decide``),
    with, for a branch-addressed signal on a FAILED run, whether its branch has ended (STALE)
    or may still take it after a retry (PARKED)."""
    kind = cmd["kind"]
    branch = (cmd["target"] or {}).get("branch") if kind == CommandKind.SIGNAL else None
    ended = bool(branch) and run["status"] == RunStatus.FAILED and _branch_ended(run["id"], str(branch))
    return outcomes.decide(kind, run["status"], branch_addressed=bool(branch), branch_ended=ended)


def canceller(run_id: Any) -> Actor | None:
    """Who cancelled the run: the actor of its latest CANCELLED entry (None when it has none).
    A command that meets the cancelled run later is logged as cancelled by them, not by the
    command's own recorder."""
    row = db.fetchdict(SQL.canceller, [run_id, "CANCELLED"])
    return actor_of(row) if row is not None else None


def settle_by_outcome(drive: Drive, cmd: CommandRow, decision: str) -> Settle:
    reason = outcomes.reason(cmd["kind"], drive.run["status"])
    if decision == outcomes.STALE and cmd["kind"] == CommandKind.SIGNAL and drive.run["status"] == RunStatus.FAILED:
        reason = "BRANCH_ENDED: the addressed branch has ended"
    if decision == outcomes.PARK:
        drive.history.add(
            "SIGNAL_PARKED",
            command_id=cmd["id"],
            actor=drive.actor,
            payload={"signal": named((cmd["target"] or {}).get("name", ""))},
        )
        return Settle(CommandStatus.PARKED)
    if cmd["kind"] == CommandKind.SIGNAL:
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
    if cmd["kind"] == CommandKind.COMPLETION and cmd.get("task_id"):
        if decision == outcomes.REJECT and drive.run["status"] == RunStatus.FAILED:
            reopen(cmd)
        else:
            db.execute(SQL.cancel_task, [cmd["task_id"]])
    if cmd["kind"] == CommandKind.TIMER and cmd.get("timer_id"):
        db.execute(SQL.timer_stale, [cmd["timer_id"]])
    entry = {
        outcomes.REJECT: "COMMAND_REJECTED",
        outcomes.STALE: "COMMAND_STALE",
        outcomes.CANCEL: "COMMAND_CANCELLED",
    }[decision]
    actor = drive.actor
    if decision == outcomes.CANCEL:
        actor = canceller(drive.run["id"]) or actor
    drive.history.add(entry, command_id=cmd["id"], actor=actor, outcome=reason.split(":", 1)[0])
    status = {
        outcomes.REJECT: CommandStatus.REJECTED,
        outcomes.STALE: CommandStatus.STALE,
        outcomes.CANCEL: CommandStatus.CANCELLED,
    }[decision]
    return Settle(status, reason)


# --- START -------------------------------------------------------------------------------


def _apply_start(drive: Drive, cmd: CommandRow) -> Settle:
    plan = drive.plan
    assert plan is not None
    if drive.run["status"] != RunStatus.PENDING:
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="ALREADY_STARTED")
        return Settle(CommandStatus.STALE, "ALREADY_STARTED: the run has already started")
    payload = cmd["payload"]
    received(drive, cmd, payload)
    initialise(drive, payload)
    outcome = driver.run_from(drive, plan.initial_step)
    driver.after_drive(drive, outcome)
    return completed(drive, cmd)


def initialise(drive: Drive, payload: Any) -> None:
    """The initial state (initialState CEL / mapper, or the payload), the subject, the baseline."""
    plan = drive.plan
    assert plan is not None
    # the application's initial state and subject resolver may fail for reasons of the moment
    # (a lookup they make): the segment rolls back and the run stays PENDING until the claim
    # lapses and the start is claimed again (engine.txt, "Starting an instance"). A CEL
    # expression in their place is the definition's own and fails the same way every time
    # (a missing key, a type, the evaluation budget): it fails the run at once.
    if plan.initial_state is not None:
        try:
            state = evaluate(plan.initial_state, {"payload": payload}, step=plan.initial_step, field="initialState")
        except DeterministicFailure as exc:
            if isinstance(exc.__cause__, ExpressionFailed):
                raise
            raise InitialisationFailed("initial state") from exc
    else:
        state = payload if payload is not None else {}
    drive.run["state"] = state
    drive.run["state_version"] = 1
    if plan.subject is not None:
        try:
            subject = evaluate(plan.subject, {"state": state}, step=plan.initial_step, field="subject")
        except DeterministicFailure as exc:
            if isinstance(exc.__cause__, ExpressionFailed):
                raise
            raise InitialisationFailed("subject") from exc
        if isinstance(subject, dict):
            drive.run["subject_type"] = str(subject.get("type") or "")[:64]
            drive.run["subject_id"] = str(subject.get("id") or "")[:255]
            drive.run["subject_version"] = str(subject.get("version") or "")[:64]
    drive.history.baseline(state, version=1, command_id=drive.command_id, actor=drive.actor)
    drive.history.add("WORKFLOW_STARTED", command_id=drive.command_id, actor=drive.actor, step=plan.initial_step)


# --- SIGNAL ------------------------------------------------------------------------------


def _apply_signal(drive: Drive, cmd: CommandRow) -> Settle:
    plan = drive.plan
    assert plan is not None
    target = cmd["target"] or {}
    name = target.get("name", "")
    received(drive, cmd, cmd["payload"])
    if not plan.waits_for(name):
        reason = f"SIGNAL_REJECTED: the plan never waits for signal {named(name)}"
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="SIGNAL_REJECTED")
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
        return Settle(CommandStatus.REJECTED, reason)
    wait = drive.run["wait"]
    branch = target.get("branch")
    if branch:
        return forks.apply_branch_signal(drive, cmd)
    routed = forks.route_instance_signal(drive, cmd)
    if routed is not None:
        return routed
    if not driver.accepts(wait, name, branch) or timers.deadline_blocked(drive.run["id"], wait, cmd["recorded_at"]):
        drive.history.add("SIGNAL_PARKED", command_id=cmd["id"], actor=drive.actor, payload={"signal": named(name)})
        return Settle(CommandStatus.PARKED)
    try:
        with drive.savepoint():
            drive.history.add(
                "SIGNAL_RECEIVED",
                command_id=cmd["id"],
                actor=drive.actor,
                payload={"signal": named(name), "payload": cmd["payload"]},
            )
            outcome = driver.apply_signal(drive, name=name, payload=cmd["payload"])
    except (DeterministicFailure, StepLimitExceeded) as exc:
        reason = failure_reason(exc)
        drive.history.add(
            "COMMAND_REJECTED",
            command_id=cmd["id"],
            actor=drive.actor,
            outcome=reason.split(":")[0],
            payload=failure_detail(exc),
        )
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
        return Settle(CommandStatus.REJECTED, reason)
    drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
    driver.after_drive(drive, outcome)
    return completed(drive, cmd)


# --- COMPLETION ----------------------------------------------------------------------------


def _apply_completion(drive: Drive, cmd: CommandRow) -> Settle:
    plan = drive.plan
    assert plan is not None
    if "_task" in cmd:  # read and locked with the run (segment.run)
        task = cmd["_task"]
        drive.open_things_beside = cmd.get("_open_beside")
    else:
        task = db.fetchdict(SQL.lock_task, [cmd["task_id"]], prepared=True)
    if task is None or task["status"] != TaskStatus.COMPLETING or task["reservation_owner"] != cmd["id"]:
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="TASK_NOT_RESERVED")
        return Settle(CommandStatus.STALE, "TASK_NOT_RESERVED: the task is not reserved by this completion")
    if task["branch_id"]:
        return forks.apply_branch_completion(drive, cmd, task)
    received(drive, cmd)
    target = cmd["target"] or {}
    try:
        with drive.savepoint():
            outcome = decisions.apply_decision(drive, task, target)
    except (DeterministicFailure, StepLimitExceeded) as exc:
        reason = failure_reason(exc)
        reopen(cmd)
        drive.history.add(
            "COMMAND_REJECTED",
            command_id=cmd["id"],
            actor=drive.actor,
            outcome=reason.split(":")[0],
            payload=failure_detail(exc),
        )
        return Settle(CommandStatus.REJECTED, reason)
    driver.after_drive(drive, outcome)
    return completed(drive, cmd)


# --- TIMER ---------------------------------------------------------------------------------


# --- RETRY ---------------------------------------------------------------------------------


def _apply_retry(drive: Drive, cmd: CommandRow) -> Settle:
    plan = drive.plan
    assert plan is not None
    run = drive.run
    has_dead = db.fetchone(SQL.has_dead, [run["id"]]) is not None
    if run["status"] != RunStatus.FAILED and not has_dead:
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="NOTHING_TO_RECOVER")
        return Settle(
            CommandStatus.STALE, "NOTHING_TO_RECOVER: the run is neither failed nor holds a dead-lettered command"
        )
    received(drive, cmd)
    outcome: Any = None
    if run["status"] == RunStatus.FAILED:
        run["failure_code"], run["failure_message"] = "", ""
        if run["state"] is None:
            start = db.fetchdict(SQL.start_command, [run["id"]])
            if start and start["status"] == CommandStatus.DEAD:
                db.execute(SQL.supersede, [start["id"]])
                drive.history.add("COMMAND_SUPERSEDED", command_id=start["id"], actor=drive.actor)
                observers.settled_on_commit(run["id"], [(start["id"], CommandKind.START, CommandStatus.SUPERSEDED)])
            initialise(drive, start["payload"] if start else None)
            drive.decide(step=plan.initial_step, outcome="retry")
            outcome = driver.run_from(drive, plan.initial_step)
        elif run["wait"]:
            # it failed while it waited: return to that wait, re-arming failed timers once
            run["status"] = RunStatus.WAITING
            timers.rearm_failed(run)
            drive.decide(step=run["current_step"] or "", outcome="retry")
            outcome = WAIT
        else:
            drive.decide(step=run["current_step"] or "", outcome="retry")
            outcome = driver.run_from(drive, run["current_step"] or plan.initial_step)
        driver.after_drive(drive, outcome)
        if run["status"] == RunStatus.WAITING:
            forks.drain_waiting_branches(drive)  # back at a join: the parked signals of its waiting branches
    if drive.run["status"] in ENDED_STATUSES:
        return completed(drive, cmd)
    offered = db.fetchall(SQL.reoffer_dead, [run["id"]])
    drive.run["open_signals"] = int(drive.run["open_signals"]) + sum(1 for (k,) in offered if k == CommandKind.SIGNAL)
    if offered:
        drive.history.add(
            "DEAD_LETTERS_REOFFERED", command_id=cmd["id"], actor=drive.actor, payload={"count": len(offered)}
        )
    wakeups.wake(run["id"])
    return completed(drive, cmd)


APPLY: dict[str, Callable[[Drive, CommandRow], Settle]] = {
    CommandKind.START: _apply_start,
    CommandKind.SIGNAL: _apply_signal,
    CommandKind.COMPLETION: _apply_completion,
    CommandKind.TIMER: timers.apply,
    CommandKind.RETRY: _apply_retry,
    CommandKind.RESUME: calls.apply_resume,
    CommandKind.MIGRATION: migration.apply_migration,
}
