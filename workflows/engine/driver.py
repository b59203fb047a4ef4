"""Driving a run through its plan until it waits or ends, and applying parked signals.

One node per ``nodes/`` module; each answers Next(step), WAIT or END. The step budget
(MAX_STEPS_PER_SEGMENT) counts every node on the segment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workflows.definitions import plan as p
from workflows.engine import db
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.nodes import decision, effects, human_task, service, terminal, timer, wait_signal
from workflows.engine.nodes.base import BRANCH_DONE, END, WAIT, Next, Outcome

NODES: dict[type, Callable[[Drive, Any], Outcome]] = {
    p.ServiceStep: service.execute,
    p.DecisionStep: decision.execute,
    p.WaitSignalStep: wait_signal.execute,
    p.TimerStep: timer.execute,
    p.HumanTaskStep: human_task.execute,
    p.CompleteStep: terminal.complete,
    p.FailStep: terminal.fail,
    p.EndStep: terminal.end,
    p.EmailStep: effects.email,
    p.AgentStep: effects.agent,
    p.ScriptStep: effects.script,
}


def register_node(step_type: type, handler: Callable[[Drive, Any], Outcome]) -> None:
    """Step types that live in other modules (fork/join, call) register here."""
    NODES[step_type] = handler


def run_from(drive: Drive, step_id: str) -> Outcome:
    """Drive the run from ``step_id`` until it waits or ends."""
    plan = drive.plan
    assert plan is not None
    drive.run["status"] = "RUNNING"
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
        handler = NODES.get(type(step))
        if handler is None:
            raise DeterministicFailure(f"DETERMINISTIC_FAILURE: step type {step.type} cannot run here")
        outcome = handler(drive, step)
        if isinstance(outcome, Next):
            current = outcome.step
            continue
        return outcome


def accepts(wait: dict[str, Any] | None, name: str, branch: str | None = None) -> bool:
    """Whether the (swapped-in) wait accepts the signal; branch addressing is checked by the
    fork/join coordinator before it swaps the branch in."""
    if not wait or wait.get("kind") != "signal":
        return False
    return name in (wait.get("signals") or [])


def deadline_blocked(run_id: Any, wait: dict[str, Any], recorded_at: Any) -> bool:
    """A signal recorded at or after its wait's timeout fire time never applies there while
    the timeout is pending, deferred, claimed or dead-lettered (or already fired)."""
    timer_id = wait.get("timeout")
    if not timer_id:
        return False
    row = db.fetchone(
        "SELECT 1 FROM workflow_timers t WHERE t.id = %s AND t.fire_at <= %s AND (t.status = 'FIRED' OR EXISTS "
        "(SELECT 1 FROM workflow_commands c WHERE c.id = t.command_id "
        "AND c.status IN ('PENDING','DEFERRED','CLAIMED','DEAD')))",
        [timer_id, recorded_at],
    )
    return row is not None


def apply_signal(drive: Drive, *, name: str, payload: Any, step_actor: Any = None) -> Outcome:
    """Apply a signal at the run's current signal wait and drive on. Caller holds a savepoint."""
    from workflows.engine import waits
    from workflows.engine.evaluate import apply_set

    plan = drive.plan
    assert plan is not None
    wait = drive.run["wait"] or {}
    step = plan.steps.get(wait.get("step", ""))
    if not isinstance(step, p.WaitSignalStep):
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the wait is not a signal wait")
    schema = step.payload_schema if step.payload_schema is not None else plan.contract.signals.get(name)
    if schema:
        from workflows.definitions import schemas

        if schemas.validate(schema, payload):
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
    from workflows.engine import segment

    outcome: Outcome = WAIT
    while drive.run["status"] == "WAITING":
        wait = drive.run["wait"] or {}
        if wait.get("kind") != "signal":
            return outcome
        rows = db.fetchdicts(
            "SELECT id, seq, payload, target, recorded_at, actor_kind, actor_id, actor_reason, on_behalf_of, "
            "attribution_status FROM workflow_commands WHERE run_id = %s AND status = 'PARKED' AND kind = 'SIGNAL' "
            "ORDER BY order_at, seq",
            [drive.run["id"]],
        )
        candidates = [
            r
            for r in rows
            if addressed_here(drive, r)
            and accepts(wait, (r["target"] or {}).get("name", ""))
            and not deadline_blocked(drive.run["id"], wait, r["recorded_at"])
        ]
        if not candidates:
            return outcome
        if drive.steps > drive.max_steps // 2:
            _requeue(drive, candidates)
            return outcome
        applied = segment.apply_parked(drive, candidates[0])
        if applied is segment.OVERRUN:
            _requeue(drive, candidates)
            return outcome
        if applied is not segment.REJECTED:
            outcome = applied
        # rejected: look at the remaining ones at the same wait
    return outcome


def _requeue(drive: Drive, candidates: list[dict[str, Any]]) -> None:
    """Back to PENDING, each at its own position (sequence and order kept), for segments of
    their own; they keep their open-signal slots."""
    from workflows.engine import wakeups

    db.execute(
        "UPDATE workflow_commands SET status = 'PENDING', available_at = now() "
        "WHERE id = ANY(%s) AND status = 'PARKED'",
        [[c["id"] for c in candidates]],
    )
    wakeups.wake(drive.run["id"])


__all__ = [
    "END",
    "WAIT",
    "Next",
    "StepLimitExceeded",
    "accepts",
    "addressed_here",
    "apply_signal",
    "drain_parked",
    "run_from",
]
