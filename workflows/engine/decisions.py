"""A decision on a human task: checked against the step, applied, and the run driven on.

Used by a COMPLETION's segment on the run's own path (``segment``) and inside a branch
(``forks.apply_branch_completion``).
"""

from __future__ import annotations

from typing import Any

from workflows.definitions import plan as p
from workflows.definitions import schemas
from workflows.engine import driver, sql, waits
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.evaluate import apply_set
from workflows.engine.settlement import named

SQL = sql.load("decisions")


def apply_decision(drive: Drive, task: dict[str, Any], target: dict[str, Any]) -> Any:
    plan = drive.plan
    assert plan is not None
    wait = drive.run["wait"] or {}
    if wait.get("kind") != "task" or wait.get("task") != str(task["id"]):
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the run does not wait for this task")
    step = plan.steps.get(task["step"])
    if not isinstance(step, p.HumanTaskStep):
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the task's step is not a human task")
    name = target.get("decision", "")
    chosen = next((d for d in step.decisions if d.name == name), None)
    if chosen is None:
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the decision is not offered")
    payload = target.get("payload")
    if chosen.payload_schema and schemas.validate(chosen.payload_schema, payload if payload is not None else {}):
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the decision payload is invalid")
    if step.require_version_stability and str(target.get("subject_version") or "") != str(
        drive.run["subject_version"] or ""
    ):
        raise DeterministicFailure("DETERMINISTIC_FAILURE: the reviewed subject version is stale")
    completed = (SQL.task_completed, [name, (target.get("completed_by") or drive.actor.id or "")[:255], task["id"]])
    # one statement for the park and the task; when the decision leads straight to the run's
    # end, what the run still holds is read in the same round trip
    ends = drive.branch is None and isinstance(plan.steps.get(chosen.next), p.CompleteStep)
    waits.leave(drive, "decision", along=[completed], read_open_things=ends)
    drive.history.add(
        "TASK_COMPLETED",
        step=step.id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"task": str(task["id"]), "decision": named(name)},
    )
    state = drive.run["state"]
    new_state = apply_set(
        chosen.set,
        state,
        {"state": state, "payload": payload or {}, "decision": name},
        step=step.id,
        field=f"decisions.{named(name)}.set",
    )
    drive.count_step()
    drive.decide(step=step.id, outcome="task-decided", new_state=new_state, change=chosen.set is not None)
    return driver.run_from(drive, chosen.next)
