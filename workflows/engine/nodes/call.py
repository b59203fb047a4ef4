"""``call``: start a child run and wait for it (its end resumes the caller: ``engine/calls.py``)."""

from __future__ import annotations

from workflows import conf
from workflows.definitions.plan import CallStep
from workflows.engine import recording, waits
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.evaluate import evaluate
from workflows.engine.nodes.base import WAIT, Outcome
from workflows.exceptions import WorkflowError
from workflows.models import ParkKind


def execute(drive: Drive, step: CallStep) -> Outcome:
    depth = int(drive.run.get("call_depth") or 0) + 1
    if depth > conf.get().EXECUTOR.MAX_CALL_DEPTH:
        raise DeterministicFailure(f"CALL_DEPTH: call of step {step.id} exceeds the maximum call depth")
    state = drive.run["state"]
    payload = evaluate(step.payload, {"state": state}, step=step.id, field="payload") if step.payload else state
    wait = waits.enter(drive, step=step.id, kind="call", park_kind=ParkKind.CALL, outcome="call")
    try:
        recorded = recording.start(
            definition_id=step.definition_id,
            version=step.version,
            scope=drive.run["start_scope"],
            payload=payload,
            actor=drive.actor,
            parent={"run_id": drive.run["id"], "step": step.id, "branch": drive.branch_id, "depth": depth},
        )
    except WorkflowError as exc:
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: call of step {step.id} refused ({exc.code})") from exc
    wait["child"] = recorded.run_id
    drive.history.add(
        "CALL_STARTED",
        step=step.id,
        branch_id=drive.branch_id,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"child": recorded.run_id},
    )
    return WAIT
