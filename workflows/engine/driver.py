"""Driving a run through its plan until it waits or ends, and applying parked signals.

One executor per step type (``nodes.EXECUTORS``); each answers Next(step), WAIT or END. The step budget
(MAX_STEPS_PER_SEGMENT) counts every node on the segment.
"""

from __future__ import annotations

from typing import Any

from workflows.definitions import plan as p
from workflows.definitions import schemas
from workflows.engine import db, nodes, observers, sql, timers, waits, wakeups
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.evaluate import apply_set
from workflows.engine.nodes.base import BRANCH_DONE, END, WAIT, Next, Outcome
from workflows.engine.rows import WaitRow
from workflows.engine.settlement import actor_of, named
from workflows.models import CommandKind, CommandStatus, RunStatus

SQL = sql.load("driver")


def run_from(drive: Drive, step_id: str) -> Outcome:
    """Drive the run from ``step_id`` until it waits or ends."""
    plan = drive.plan
    assert plan is not None
    drive.run["status"] = RunStatus.RUNNING
    drive.run["wait"] = None
    current = step_id
    while True:
        if not current:
            raise DeterministicFailure("DETERMINISTIC_FAILURE: a step has no next step")
        if drive.branch is not None and current == drive.branch_join:
            drive.run["current_step"] = current
            return BRANCH_DONE  # the branch's path reached its join
        drive.count_step()
        drive.run["current_step"] = current
        step = plan.steps.get(current)
        if step is None:
            raise DeterministicFailure("DETERMINISTIC_FAILURE: the plan has no such step")
        outcome = nodes.EXECUTORS[type(step)](drive, step)
        if isinstance(outcome, Next):
            current = outcome.step
            continue
        return outcome


def accepts(wait: WaitRow | None, name: str, branch: str | None = None) -> bool:
    """Whether the (swapped-in) wait accepts the signal; branch addressing is checked by the
    fork/join coordinator before it swaps the branch in."""
    if not wait or wait.get("kind") != "signal":
        return False
    return name in (wait.get("signals") or [])


def apply_signal(drive: Drive, *, name: str, payload: Any, step_actor: Any = None) -> Outcome:
    """Apply a signal at the run's current signal wait and drive on. Caller holds a savepoint."""
    plan = drive.plan
    assert plan is not None
    wait = drive.run["wait"] or {}
    step = plan.steps.get(wait.get("step", ""))
    if not isinstance(step, p.WaitSignalStep):
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the wait is not a signal wait")
    schema = step.payload_schema if step.payload_schema is not None else plan.contract.signals.get(name)
    if schema and schemas.validate(schema, payload):
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: payload of signal {name} is invalid")
    state = drive.run["state"]
    new_state = apply_set(step.set, state, {"state": state, "payload": payload}, step=step.id, field="set")
    waits.leave(drive, "signal")
    drive.count_step()
    drive.decide(step=step.id, outcome="signal-applied", new_state=new_state, change=step.set is not None)
    return run_from(drive, step.next or "")


def addressed_here(drive: Drive, row: dict[str, Any]) -> bool:
    """Whether a parked signal may be applied at the wait being drained: a branch-addressed
    one only at a wait of that branch (never in a sibling branch, nor at the run's own wait
    after the join); an instance-addressed one at any wait that accepts its name."""
    branch = (row["target"] or {}).get("branch")
    if not branch:
        return True
    return drive.branch is not None and str(branch) == drive.branch_id


def drain_parked(drive: Drive) -> Outcome:
    """Apply the parked signals the reached wait accepts, in queue order, each in a savepoint;
    answers the outcome of the last drive (WAIT when none was applied or it waits again).

    Only while the nodes executed are at most half the budget. When the next one would start
    beyond that, or its application overruns the budget inside its savepoint, it and every
    other signal the wait accepts go back to PENDING at their positions (none is applied out
    of queue order) and each runs as a segment of its own.
    """
    outcome: Outcome = WAIT
    while drive.run["status"] == RunStatus.WAITING:
        wait = drive.run["wait"] or {}
        if wait.get("kind") != "signal":
            return outcome
        rows = db.fetchdicts(SQL.parked_signals, [drive.run["id"]])
        candidates = [
            r
            for r in rows
            if addressed_here(drive, r)
            and accepts(wait, (r["target"] or {}).get("name", ""))
            and not timers.deadline_blocked(drive.run["id"], wait, r["recorded_at"])
        ]
        if not candidates:
            return outcome
        if drive.steps > drive.max_steps // 2:
            _requeue(drive, candidates)
            return outcome
        applied = apply_parked(drive, candidates[0])
        if applied is OVERRUN:
            _requeue(drive, candidates)
            return outcome
        if applied is not REJECTED:
            outcome = applied
        # rejected: look at the remaining ones at the same wait
    return outcome


def _requeue(drive: Drive, candidates: list[dict[str, Any]]) -> None:
    """Back to PENDING, each at its own position (sequence and order kept), for segments of
    their own; they keep their open-signal slots."""
    db.execute(SQL.requeue_parked, [[c["id"] for c in candidates]])
    wakeups.wake(drive.run["id"])


def after_drive(drive: Drive, outcome: Any) -> None:
    """A command drove the run (or a branch) to a wait: apply the parked signals it accepts."""
    if outcome is WAIT or drive.run["status"] == RunStatus.WAITING:
        drain_parked(drive)


class _Unapplied:
    """A parked signal the drain tried but did not apply (``apply_parked``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REJECTED = _Unapplied("REJECTED")  # it failed deterministically: settled REJECTED
OVERRUN = _Unapplied("OVERRUN")  # it ran past the step budget: rolled back, still PARKED


def apply_parked(drive: Drive, row: dict[str, Any]) -> Any:
    """Apply one parked signal at the reached wait. Answers the outcome of its drive (the
    run's or the branch's: WAIT, END, BRANCH_DONE...) when applied, else REJECTED or
    OVERRUN (the caller sets it back to PENDING with the others the wait accepts)."""
    name = (row["target"] or {}).get("name", "")
    executing_actor, executing_command = drive.actor, drive.command_id
    drive.actor, drive.command_id = actor_of(row), row["id"]
    try:
        try:
            with drive.savepoint():
                # settled first, inside the savepoint (a failure puts it back to PARKED): if
                # applying it ends the run, the teardown must not find it PARKED and reject it
                db.execute(SQL.parked_applied, [row["id"]])
                observers.settled_on_commit(drive.run["id"], [(row["id"], CommandKind.SIGNAL, CommandStatus.COMPLETE)])
                drive.history.add(
                    "SIGNAL_APPLIED",
                    command_id=row["id"],
                    actor=drive.actor,
                    branch_id=drive.branch_id,
                    payload={"signal": named(name), "payload": row["payload"]},
                )
                outcome = apply_signal(drive, name=name, payload=row["payload"])
        except StepLimitExceeded:
            return OVERRUN  # past the budget inside its savepoint: nothing of it stays
        except DeterministicFailure as exc:
            db.execute(SQL.parked_rejected, [exc.reason[:4000], row["id"]])
            drive.history.add(
                "COMMAND_REJECTED",
                command_id=row["id"],
                actor=drive.actor,
                outcome=exc.reason.split(":")[0],
                payload=exc.detail,
            )
            observers.settled_on_commit(drive.run["id"], [(row["id"], CommandKind.SIGNAL, CommandStatus.REJECTED)])
            drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
            return REJECTED
        drive.history.add("COMMAND_COMPLETED", command_id=row["id"], actor=drive.actor)
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
        return outcome
    finally:
        drive.actor, drive.command_id = executing_actor, executing_command


__all__ = [
    "END",
    "WAIT",
    "Next",
    "StepLimitExceeded",
    "accepts",
    "addressed_here",
    "after_drive",
    "apply_parked",
    "apply_signal",
    "drain_parked",
    "run_from",
]
