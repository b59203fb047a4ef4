"""``complete``, ``fail`` and ``end`` (terminate): the ways a run reaches its end."""

from __future__ import annotations

from workflows.definitions.plan import CompleteStep, EndStep, FailStep
from workflows.engine import outbox, teardown
from workflows.engine.context import Drive
from workflows.engine.evaluate import evaluate
from workflows.engine.nodes.base import BRANCH_DONE, END, Outcome
from workflows.models import BranchStatus, RunStatus


def complete(drive: Drive, step: CompleteStep) -> Outcome:
    if drive.branch is not None:
        drive.decide(step=step.id, outcome="branch-completed")
        return BRANCH_DONE
    drive.decide(step=step.id, outcome="completed")
    drive.history.add("WORKFLOW_COMPLETED", step=step.id, command_id=drive.command_id, actor=drive.actor)
    teardown.end_run(drive, RunStatus.COMPLETED)
    return END


def end(drive: Drive, step: EndStep) -> Outcome:
    drive.decide(step=step.id, outcome="ended")
    drive.history.add(
        "WORKFLOW_COMPLETED",
        step=step.id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"reason": step.reason or "terminated"},
    )
    teardown.end_run(drive, RunStatus.COMPLETED)
    return END


def fail(drive: Drive, step: FailStep) -> Outcome:
    message = ""
    if step.message is not None:
        value = evaluate(step.message, {"state": drive.run["state"]}, step=step.id, field="message")
        message = str(value)[:4000] if value is not None else ""
    if drive.branch is not None:
        drive.decide(step=step.id, outcome="branch-failed")
        drive.branch["status"] = BranchStatus.FAILED
        drive.branch["result"] = {"error": step.error_type, "message": message}
        return BRANCH_DONE
    done = list(drive.run.get("compensation") or [])
    if done:
        # saga: run the compensations of completed steps in reverse order, each once
        drive.decide(step=step.id, outcome="compensation")
        drive.run["status"] = RunStatus.COMPENSATING
        drive.history.add("COMPENSATION_STARTED", step=step.id, command_id=drive.command_id, actor=drive.actor)
        for item in reversed(done):
            outbox.compensate(drive, forward_step=item["step"], compensation_step=item["compensation"])
        drive.run["compensation"] = []
        drive.history.add("WORKFLOW_COMPENSATED", step=step.id, command_id=drive.command_id, actor=drive.actor)
        teardown.end_run(drive, RunStatus.COMPENSATED, code=step.error_type, message=message)
        return END
    drive.decide(step=step.id, outcome="failed")
    drive.history.add(
        "WORKFLOW_FAILED",
        step=step.id,
        command_id=drive.command_id,
        actor=drive.actor,
        outcome=step.error_type[:40],
    )
    drive.run["wait"] = None
    teardown.end_run(drive, RunStatus.FAILED, code=step.error_type, message=message)
    return END
