"""``call``: the child's end resumes its caller (the node that starts the child is ``nodes/call.py``).

A child that completes continues the caller (``set``, ``next``); one that fails, compensates
or expires takes the call's ``onFailure`` (else the caller fails, ``CALL_FAILED``); one that is
cancelled cancels the caller too (see ``teardown``).

The child is recorded in the caller's segment transaction (its START runs after commit).
When the child ends, an outbox intent records a RESUME command on the caller in a
transaction of its own (the child never waits for its caller's lock, so the lock order
caller → child of teardown can never deadlock). Depth is bounded by MAX_CALL_DEPTH.
"""

from __future__ import annotations

from typing import Any

from workflows.definitions import plan as p
from workflows.engine import driver, forks, teardown, waits
from workflows.engine.context import Drive
from workflows.engine.evaluate import apply_set
from workflows.engine.nodes.base import END, WAIT, Outcome
from workflows.engine.rows import CommandRow
from workflows.engine.settlement import Settle, completed, received
from workflows.models import BranchStatus, CommandStatus, RunStatus


def _resume_here(drive: Drive, step: p.CallStep, target: dict[str, Any], result: Any) -> Outcome:
    status = target.get("status", "")
    waits.leave(drive, "returned" if status == RunStatus.COMPLETED else "call-failed")
    drive.count_step()
    drive.history.add(
        "CALL_RETURNED",
        step=step.id,
        branch_id=drive.branch_id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"child": target.get("child"), "status": status},
    )
    if status == RunStatus.COMPLETED:
        state = drive.run["state"]
        new_state = apply_set(
            step.set, state, {"state": state, "result": result, "status": status}, step=step.id, field="set"
        )
        drive.decide(step=step.id, outcome="call-returned", new_state=new_state, change=step.set is not None)
        return driver.run_from(drive, step.next or "")
    drive.decide(step=step.id, outcome="call-failed")
    if step.on_failure:
        return driver.run_from(drive, step.on_failure)
    if drive.branch is not None:
        drive.branch["status"] = BranchStatus.FAILED
        return WAIT
    drive.history.add(
        "WORKFLOW_FAILED", step=step.id, command_id=drive.command_id, actor=drive.actor, outcome="CALL_FAILED"
    )
    teardown.end_run(drive, "FAILED", code="CALL_FAILED", message=f"the run called at step {step.id} did not complete")
    return END


def apply_resume(drive: Drive, cmd: CommandRow) -> Settle:
    plan = drive.plan
    assert plan is not None
    target = cmd["target"] or {}
    child = str(target.get("child", ""))
    wait = drive.run["wait"] or {}
    step = plan.steps.get(target.get("step", ""))
    if not isinstance(step, p.CallStep):
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="NOT_WAITING")
        return Settle(CommandStatus.STALE, "NOT_WAITING: the run does not wait for a called run")
    received(drive, cmd)
    if target.get("status") == RunStatus.CANCELLED and teardown.waiting_callers(
        {"id": child, "parent_run_id": drive.run["id"]}, {str(drive.run["id"]): drive.run}
    ):
        # a called run cancelled by the executor (the Migrate dialog's Cancel): the run waiting
        # on it at a call is cancelled too, as an operator's cancel does in one transaction
        teardown.cancel_in_segment(drive, command_id=cmd["id"], reason=teardown.CALLED_RUN_CANCELLED)
        return completed(drive, cmd)
    if wait.get("kind") == "call" and str(wait.get("child")) == child:
        outcome = _resume_here(drive, step, target, cmd["payload"])
        driver.after_drive(drive, outcome)
        return completed(drive, cmd)
    # a branch waiting on this child?
    for branch in forks.waiting_on_child(drive, child):
        outcome = forks.continue_in_branch(
            drive, branch, lambda b=branch: _resume_here(drive, step, target, cmd["payload"])
        )
        driver.after_drive(drive, outcome)
        return completed(drive, cmd)
    drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="NOT_WAITING")
    return Settle(CommandStatus.STALE, "NOT_WAITING: the run does not wait for that called run")
