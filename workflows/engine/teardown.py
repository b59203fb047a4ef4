"""Ending a run, for any reason, all the way down.

Ending cancels every open branch, withdraws every approval the run holds (on the main path
and inside forks), disarms its timers, closes its parks, settles its parked and
dead-lettered commands, and then does the same for every run it called and waits on. The
caller is closed before its children (lock order caller → child; no path locks the other
way round, because a child resumes its caller through an outbox intent, not a lock).

A run that ends ``FAILED`` through the graph (a ``fail`` step, a join that can no longer be
met, a call that did not complete) is torn down the same way: nothing of it is left waiting,
and a retry starts again from its step.

Cancelling a called run also cancels the run waiting on it at a call (the reference: "the run
becomes cancelled, and so does a run waiting on it at a call"), and so on up the chain. An
operator's cancel locks that chain top-down before the run (``lock_callers``) and closes the
callers first; a cancel the executor makes inside a called run's segment (the Migrate
dialog's Cancel) cannot take its caller's lock, so it resumes the caller through an outbox
``RESUME`` with status ``CANCELLED``, whose segment cancels the caller in turn.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from django.utils import timezone

from workflows.engine import commands, db, locks, observers, outbox, pipeline, sql
from workflows.engine.actors import Actor, sanitise
from workflows.engine.context import Drive
from workflows.engine.rows import RunLink, RunRow
from workflows.engine.settlement import actor_of
from workflows.models import ENDED_STATUSES, CommandKind, CommandStatus, RunStatus, TaskStatus

SQL = sql.load("teardown")

# the caller's side of a called run cancelled under it (history of the caller)
CALLED_RUN_CANCELLED = "called run cancelled"


def _withdraw_tasks(drive: Drive, *, status: str) -> None:
    tasks = db.fetchdicts(SQL.withdraw_tasks, [status, drive.run["id"]])
    for t in tasks:
        drive.history.add(
            "TASK_WITHDRAWN" if status == TaskStatus.WITHDRAWN else "TASK_CANCELLED",
            step=t["step"],
            branch_id=t["branch_id"],
            actor=drive.actor,
            command_id=drive.command_id,
            payload={"task": str(t["id"])},
        )


def open_things(run_id: Any) -> dict[str, bool]:
    """What an ending run still holds, in one read, so the teardown writes only what it must."""
    with pipeline.statement_cursor(True) as cur:
        pipeline.run(cur, SQL.open_things, {"r": run_id})
        cols = [c[0] for c in cur.description]
        return dict(zip(cols, cur.fetchone(), strict=True))


def _close_everything(drive: Drive, *, how: str, task_status: str, found: dict[str, bool] | None = None) -> None:
    run_id = drive.run["id"]
    found = found if found is not None else open_things(run_id)
    if found["parks"]:
        db.execute(SQL.leave_parks, [how, run_id])
    if found["timers"]:
        for t in commands.cancel_timers(run_id):
            drive.history.add("TIMER_CANCELLED", step=t["step"], command_id=t["command_id"], actor=drive.actor)
    if found["tasks"]:
        _withdraw_tasks(drive, status=task_status)
    if found["branches"]:
        db.execute(SQL.cancel_branches, [run_id])
    drive.run["wait"] = None


def settle_parked_and_dead(drive: Drive, *, status: str, reason: str) -> None:
    """Settle the run's PARKED and DEAD commands in one write (REJECTED, or CANCELLED)."""
    rows = db.fetchdicts(SQL.settle_parked_and_dead, [drive.run["id"], status, reason])
    for r in rows:
        drive.history.add(
            "COMMAND_REJECTED" if status == "REJECTED" else "COMMAND_CANCELLED",
            command_id=r["id"],
            outcome=reason.split(":", 1)[0],
            actor=actor_of(r),
        )
    observers.settled_on_commit(drive.run["id"], [(r["id"], r["kind"], status) for r in rows])
    # a parked signal still holds its open-signal slot; a dead-lettered one released it
    held = sum(1 for r in rows if r["kind"] == CommandKind.SIGNAL and r["prior"] == CommandStatus.PARKED)
    drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - held)


def end_run(drive: Drive, status: str, *, how: str = "ended", code: str = "", message: str = "") -> None:
    """End the run in this transaction (COMPLETED/FAILED/COMPENSATED/EXPIRED).

    FAILED here is a failure the graph reached (``fail``, a failed join, a failed call): it
    tears down like an ending — branches, approvals, timers, called runs — because nothing the
    run still held can continue it (a retry starts again from its step). It keeps its parked
    and dead-lettered commands for that retry. (A command that fails deterministically fails
    the run elsewhere and keeps the wait it failed in.)"""
    run = drive.run
    run["status"] = status
    if status in ENDED_STATUSES or status == RunStatus.FAILED:
        if status in ENDED_STATUSES:
            run["ended_at"] = timezone.now()
        # read with the wait's leaving when the run went straight from it to its end
        found, drive.open_things = drive.open_things or open_things(run["id"]), None
        _close_everything(drive, how=how, task_status=TaskStatus.WITHDRAWN, found=found)
        if found["settle"] and status in ENDED_STATUSES:
            settle_parked_and_dead(drive, status=CommandStatus.REJECTED, reason="INSTANCE_ENDED: the run has ended")
        if found["children"]:
            _teardown_children(drive, reason="caller failed" if status == RunStatus.FAILED else "caller ended")
    if code:
        run["failure_code"] = code[:64]
        run["failure_message"] = message[:4000]
    drive.ended_now = True
    if run.get("parent_run_id") and status in (*ENDED_STATUSES, RunStatus.FAILED):
        outbox.resume_parent(drive, status=status)


def _teardown_children(drive: Drive, *, reason: str, spare: Any = None, only: list[Any] | None = None) -> None:
    """Cancel the live runs this run called (``only``: just those), except ``spare`` (the
    next run down a caller chain being cancelled, which its own turn cancels)."""
    if only is not None:
        if not only:
            return
        children = db.fetchall(SQL.live_children_among, [drive.run["id"], only])
    else:
        children = db.fetchall(SQL.live_children, [drive.run["id"]])
    for (child_id,) in children:
        if spare is not None and str(child_id) == str(spare):
            continue
        child = locks.lock_called_run(child_id, executor=bool(drive.executor_id))
        if child["status"] in ENDED_STATUSES:
            continue  # ended between the read and the lock
        cancel_locked(child, actor=drive.actor, reason=reason, executor_id=drive.executor_id)


def cancel_branch_children(drive: Drive, branches: list[dict[str, Any]], *, reason: str) -> None:
    """Cancel the runs that these (superseded or failed) branches called and wait on."""
    waiting = [str(b["wait"]["child"]) for b in branches if isinstance(b.get("wait"), dict) and b["wait"].get("child")]
    _teardown_children(drive, reason=reason, only=waiting)


# --- a called run cancelled: its caller too --------------------------------------------------


def lock_callers(run_id: Any) -> dict[str, RunRow]:
    """Lock the live runs above ``run_id`` in its call chain, the topmost first, before the run
    itself is locked: the lock order is caller → child everywhere (teardown goes down)."""
    return {str(caller_id): locks.lock_run(caller_id) for (caller_id,) in db.fetchall(SQL.ancestors, [run_id])}


def _waits_on(caller: RunRow, child_id: Any) -> bool:
    if caller["status"] != RunStatus.WAITING:
        return False
    wait = caller.get("wait") or {}
    if wait.get("kind") == "call" and str(wait.get("child")) == str(child_id):
        return True
    return db.fetchone(SQL.branch_waits_on, [caller["id"], str(child_id)]) is not None


def waiting_callers(run: RunLink, callers: dict[str, RunRow]) -> list[RunRow]:
    """The runs waiting on ``run`` at a call, and on those, up the chain: nearest first."""
    chain: list[RunRow] = []
    below: RunLink = run
    while below.get("parent_run_id"):
        caller = callers.get(str(below["parent_run_id"]))
        if caller is None or not _waits_on(caller, below["id"]):
            break
        chain.append(caller)
        below = caller
    return chain


def cancel_with_callers(run: RunRow, callers: dict[str, RunRow], *, actor: Actor, reason: str) -> Drive:
    """Cancel ``run`` and every run waiting on it at a call, callers first (all locked by
    ``lock_callers`` and ``locks.lock_run`` in that order)."""
    chain = waiting_callers(run, callers)
    downwards = [*reversed(chain), run]
    for caller, below in pairwise(downwards):
        cancel_locked(caller, actor=actor, reason=CALLED_RUN_CANCELLED, spare=below["id"])
    return cancel_locked(run, actor=actor, reason=reason)


def cancel_locked(run: RunRow, *, actor: Actor, reason: str, executor_id: str = "", spare: Any = None) -> Drive:
    """Cancel a run whose execution lock the caller holds (the teardown of ``cancel``); its
    called runs go with it (but ``spare``, see ``cancel_with_callers``)."""
    drive = Drive.for_run(run, None, actor, executor_id=executor_id)
    cancelled = _cancel_commands(run["id"])
    open_signals = 0
    for c in cancelled:
        if c["kind"] == CommandKind.SIGNAL and c["prior"] != CommandStatus.DEAD:
            open_signals += 1
        drive.history.add("COMMAND_CANCELLED", command_id=c["id"], outcome="INSTANCE_CANCELLED", actor=actor)
    observers.settled_on_commit(run["id"], [(c["id"], c["kind"], CommandStatus.CANCELLED) for c in cancelled])
    run["open_signals"] = max(0, int(run["open_signals"]) - open_signals)
    _close_everything(drive, how="cancelled", task_status=TaskStatus.CANCELLED)
    run["status"] = RunStatus.CANCELLED
    run["ended_at"] = timezone.now()
    run["cancel_reason"] = sanitise(reason.replace("\n", " "))[:255]
    drive.history.add(
        "CANCELLED", actor=actor, payload={"reason": run["cancel_reason"]} if run["cancel_reason"] else None
    )
    drive.history.add("WORKFLOW_CANCELLED", actor=actor)
    drive.save()
    _teardown_children(drive, reason="caller cancelled", spare=spare)
    return drive


def cancel_in_segment(drive: Drive, *, command_id: Any, reason: str) -> None:
    """The cancel teardown inside a segment of the run (its lock held by the segment): every
    other open command (the executing one is settled by the segment, fenced on its token),
    timers, approvals, branches and called runs. A called run then resumes its caller through
    the outbox with status CANCELLED: the executor never waits for a caller's lock."""
    run = drive.run
    cancelled = db.fetchdicts(SQL.cancel_other_commands, [run["id"], command_id])
    held = 0
    for c in cancelled:
        if c["kind"] == CommandKind.SIGNAL and c["prior"] != CommandStatus.DEAD:
            held += 1
        drive.history.add("COMMAND_CANCELLED", command_id=c["id"], outcome="INSTANCE_CANCELLED", actor=drive.actor)
    observers.settled_on_commit(run["id"], [(c["id"], c["kind"], CommandStatus.CANCELLED) for c in cancelled])
    run["open_signals"] = max(0, int(run["open_signals"]) - held)
    _close_everything(drive, how="cancelled", task_status=TaskStatus.CANCELLED)
    run["status"] = RunStatus.CANCELLED
    run["ended_at"] = timezone.now()
    run["cancel_reason"] = reason
    drive.history.add("CANCELLED", command_id=command_id, actor=drive.actor, payload={"reason": reason})
    drive.history.add("WORKFLOW_CANCELLED", command_id=command_id, actor=drive.actor)
    drive.ended_now = True
    _teardown_children(drive, reason="caller cancelled")
    if run.get("parent_run_id"):
        outbox.resume_parent(drive, status=RunStatus.CANCELLED)


def _cancel_commands(run_id: Any) -> list[dict[str, Any]]:
    return db.fetchdicts(SQL.cancel_commands, [run_id])
