"""Fork/join: branch tokens, branch-addressed signals and completions, the join.

A fork dispatches one branch per listed start step (the ``fork`` node, ``nodes/fork.py``).
Each branch is a path through the graph with waits of its own, driven by the ordinary nodes
on its own copy of the state (``Drive.in_branch``). A branch ends when its path reaches the fork's join step (or a
``complete``), or fails at a ``fail`` step. The join is decided once (compare-and-set on the
join row) under its policy — ``all``, ``any`` or ``n-of-m`` — then the reducer folds the
branch results into the instance state and the run continues after the join, or routes to
``onFailure`` (or fails) when the policy can no longer be met. Branches still open when the
join decides are superseded: their approvals withdrawn, timers disarmed, parks closed.
A branch's timers fire inside it (``timers``, through ``continue_in_branch``).
"""

from __future__ import annotations

import copy
from typing import Any

from workflows.definitions import plan as p
from workflows.engine import db, decisions, driver, sql, teardown, timers, waits
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.evaluate import apply_set
from workflows.engine.nodes.base import BRANCH_DONE, END, WAIT, Outcome
from workflows.engine.rows import CommandRow
from workflows.engine.settlement import Settle, completed, failure_detail, failure_reason, named, received, reopen
from workflows.models import BranchStatus, CommandStatus, RunStatus

SQL = sql.load("forks")

# A branch that can take no more signals: it reached its join, failed, was cancelled with
# its run, or was superseded (the join decided without it, or its fork was entered again).
BRANCH_ENDED = (BranchStatus.COMPLETED, BranchStatus.FAILED, BranchStatus.CANCELLED, BranchStatus.SUPERSEDED)


def fork_branches(run_id: Any, fork_step: str) -> list[dict[str, Any]]:
    return db.fetchdicts(SQL.fork_branches, [run_id, fork_step])


def waiting_on_child(drive: Drive, child: str) -> list[dict[str, Any]]:
    """The branches of the run waiting at a call on ``child`` (locked)."""
    return db.fetchdicts(SQL.waiting_on_child, [drive.run["id"], child])


def _save_branch(branch: dict[str, Any]) -> None:
    db.execute(
        SQL.save_branch,
        [
            branch["status"],
            branch["current_step"] or "",
            db.jsonb(branch["wait"]),
            db.jsonb(branch["state"]),
            db.jsonb(branch["result"]),
            int(branch["attempts"] or 0),
            branch["id"],
        ],
    )


def join_step(plan: p.Plan, fork: p.ForkStep) -> p.JoinStep:
    join = plan.steps.get(fork.join)
    if not isinstance(join, p.JoinStep):
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: fork {fork.id} has no join step")
    return join


def drive_branch(drive: Drive, branch: dict[str, Any], join: p.JoinStep, body: Any) -> None:
    with drive.in_branch(branch, join.id):
        outcome = body()
        if outcome is WAIT:
            # the parked signals this branch's wait accepts (addressed to it, or to the run);
            # one may carry the branch on to its join, which the lines below then record
            outcome = driver.drain_parked(drive)
    while branch["status"] == BranchStatus.FAILED and _retry_branch(drive, branch):
        start = branch["current_step"]
        with drive.in_branch(branch, join.id):
            outcome = driver.run_from(drive, start)
            if outcome is WAIT:
                outcome = driver.drain_parked(drive)
    if outcome is BRANCH_DONE and branch["status"] not in (BranchStatus.FAILED,):
        branch["status"] = BranchStatus.COMPLETED
        branch["result"] = branch["state"]
        drive.history.add(
            "BRANCH_COMPLETED",
            step=join.id,
            branch_id=branch["branch_id"],
            command_id=drive.command_id,
            actor=drive.actor,
        )
    elif branch["status"] == BranchStatus.FAILED:
        drive.history.add(
            "BRANCH_FAILED",
            step=branch["current_step"] or "",
            branch_id=branch["branch_id"],
            command_id=drive.command_id,
            actor=drive.actor,
        )
    _save_branch(branch)


def _retry_branch(drive: Drive, branch: dict[str, Any]) -> bool:
    """The fork's ``retryPolicy``: a branch that failed and has attempts left starts again from
    its first step, on a fresh copy of the state the fork dispatched (``maxAttempts`` counts
    every attempt, the first included; without a policy there is one)."""
    plan = drive.plan
    assert plan is not None
    fork = plan.steps.get(branch["fork_step"])
    max_attempts = fork.retry_max_attempts if isinstance(fork, p.ForkStep) else 1
    attempt = int(branch["attempts"] or 0) + 1  # the attempt that just failed
    if attempt >= max(1, max_attempts):
        return False
    join_row = db.fetchdict(SQL.join_base, [drive.run["id"], branch["fork_step"]])
    drive.history.add(
        "BRANCH_FAILED",
        step=branch["current_step"] or "",
        branch_id=branch["branch_id"],
        command_id=drive.command_id,
        actor=drive.actor,
        outcome=f"attempt {attempt} of {max_attempts}",
    )
    # a failed branch has left its wait; anything it still holds is closed before it starts over
    waits.close_branch_wait(drive, branch["wait"], "retried")
    drive.history.add(
        "BRANCH_RETRIED",
        step=branch["branch_id"],
        branch_id=branch["branch_id"],
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"attempt": attempt + 1, "max_attempts": max_attempts},
    )
    branch.update(
        status=BranchStatus.RUNNING,
        attempts=attempt,
        current_step=branch["branch_id"],  # a branch is named by its first step
        wait=None,
        result=None,
        state=copy.deepcopy(join_row["base"] if join_row else drive.run["state"]),
    )
    return True


def _supersede(drive: Drive, branches: list[dict[str, Any]]) -> None:
    superseded = [b for b in branches if b["status"] in (BranchStatus.RUNNING, BranchStatus.WAITING)]
    # the runs these branches called go first, while their waits still name them
    teardown.cancel_branch_children(drive, superseded, reason="branch superseded")
    for b in branches:
        if b["status"] not in (BranchStatus.RUNNING, BranchStatus.WAITING):
            continue
        waits.close_branch_wait(drive, b["wait"], "superseded")
        tasks = db.fetchdicts(SQL.withdraw_branch_tasks, [drive.run["id"], b["branch_id"]])
        for t in tasks:
            drive.history.add(
                "TASK_WITHDRAWN",
                step=t["step"],
                branch_id=b["branch_id"],
                actor=drive.actor,
                command_id=drive.command_id,
                payload={"task": str(t["id"])},
            )
        b["status"], b["wait"] = BranchStatus.SUPERSEDED, None
        _save_branch(b)


def decide_join(drive: Drive, fork_step: str) -> Outcome:
    """Decide the join once its policy is met or can no longer be met; else keep waiting."""
    plan = drive.plan
    assert plan is not None
    join_row = db.fetchdict(SQL.lock_join, [drive.run["id"], fork_step])
    if join_row is None or join_row["decided"]:
        return WAIT
    branches = fork_branches(drive.run["id"], fork_step)
    live = [b for b in branches if b["status"] != BranchStatus.SUPERSEDED]
    done = [b for b in live if b["status"] == BranchStatus.COMPLETED]
    failed = [b for b in live if b["status"] == BranchStatus.FAILED]
    active = [b for b in live if b["status"] in (BranchStatus.RUNNING, BranchStatus.WAITING)]
    required = int(join_row["required"])
    policy = join_row["policy"]
    if policy == "all":
        met, impossible = len(done) == len(live), bool(failed)
    else:
        met, impossible = len(done) >= required, len(done) + len(active) < required
    if not met and not impossible:
        return WAIT
    outcome = "joined" if met else "join-failed"
    updated = db.execute(SQL.decide_join, [outcome, join_row["id"]])
    if updated != 1:
        return WAIT
    _supersede(drive, active)
    join = plan.steps[join_row["join_step"]]
    assert isinstance(join, p.JoinStep)
    waits.leave(drive, "joined" if met else "join-failed")
    drive.count_step()
    if met:
        results = {b["branch_id"]: b["result"] for b in done}
        state = drive.run["state"]
        if join.reducer is not None:
            new_state = apply_set(
                join.reducer, state, {"state": state, "results": results}, step=join.id, field="reducer"
            )
        else:
            new_state = _merge_changes(state, join_row["base"], [b["result"] for b in done])
        drive.decide(step=join.id, outcome="joined", new_state=new_state, change=True)
        return driver.run_from(drive, join.next or "")
    drive.decide(step=join.id, outcome="join-failed")
    if join.on_failure:
        return driver.run_from(drive, join.on_failure)
    drive.history.add(
        "WORKFLOW_FAILED", step=join.id, command_id=drive.command_id, actor=drive.actor, outcome="BRANCH_FAILED"
    )
    teardown.end_run(drive, "FAILED", code="BRANCH_FAILED", message="a branch failed and the join has no onFailure")
    return END


def _merge_changes(state: Any, base: Any, results: list[Any]) -> Any:
    """Without a reducer: each completed branch's changed keys, in branch order."""
    merged = dict(state or {})
    base = base or {}
    for result in results:
        if not isinstance(result, dict):
            continue
        for key, value in result.items():
            if key not in base or base[key] != value:
                merged[key] = value
    return merged


def find_branch(drive: Drive, branch_id: str) -> dict[str, Any] | None:
    rows = db.fetchdicts(SQL.find_branch, [drive.run["id"], branch_id])
    return rows[0] if rows else None


def continue_in_branch(drive: Drive, branch: dict[str, Any], body: Any) -> Outcome:
    plan = drive.plan
    assert plan is not None
    fork = plan.steps.get(branch["fork_step"])
    assert isinstance(fork, p.ForkStep)
    join = join_step(plan, fork)
    drive_branch(drive, branch, join, body)
    if drive.run["status"] not in (RunStatus.WAITING, RunStatus.RUNNING):
        return END
    return decide_join(drive, fork.id)


def apply_branch_signal(drive: Drive, cmd: CommandRow) -> Settle:
    target = cmd["target"] or {}
    name, branch_id = target.get("name", ""), target.get("branch", "")
    branch = find_branch(drive, branch_id)
    if branch is None or branch["status"] in BRANCH_ENDED:
        drive.history.add(
            "COMMAND_STALE",
            command_id=cmd["id"],
            actor=drive.actor,
            outcome="BRANCH_ENDED",
            branch_id=branch_id if named(branch_id) == branch_id else "",
        )
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
        return Settle(CommandStatus.STALE, "BRANCH_ENDED: the addressed branch has ended")
    wait = branch["wait"]
    if (
        branch["status"] != BranchStatus.WAITING
        or not driver.accepts(wait, name)
        or timers.deadline_blocked(drive.run["id"], wait, cmd["recorded_at"])
    ):
        drive.history.add(
            "SIGNAL_PARKED",
            command_id=cmd["id"],
            actor=drive.actor,
            branch_id=branch["branch_id"],
            payload={"signal": named(name)},
        )
        return Settle(CommandStatus.PARKED)
    try:
        with drive.savepoint():
            drive.history.add(
                "SIGNAL_RECEIVED",
                command_id=cmd["id"],
                actor=drive.actor,
                branch_id=branch["branch_id"],
                payload={"signal": named(name), "payload": cmd["payload"]},
            )
            outcome = continue_in_branch(
                drive, branch, lambda: driver.apply_signal(drive, name=name, payload=cmd["payload"])
            )
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


def route_instance_signal(drive: Drive, cmd: CommandRow) -> Settle | None:
    """An instance-addressed signal while the run waits at a join: deliver it to the one
    waiting branch that accepts it (None when there is not exactly one)."""
    wait = drive.run["wait"] or {}
    if wait.get("kind") != "join":
        return None
    name = (cmd["target"] or {}).get("name", "")
    waiting = [
        b
        for b in fork_branches(drive.run["id"], wait.get("fork", ""))
        if b["status"] == BranchStatus.WAITING and driver.accepts(b["wait"], name)
    ]
    if len(waiting) != 1:
        return None
    routed = cmd.copy()
    routed["target"] = {**(cmd["target"] or {}), "branch": waiting[0]["branch_id"]}
    return apply_branch_signal(drive, routed)


def apply_branch_completion(drive: Drive, cmd: CommandRow, task: dict[str, Any]) -> Settle:
    branch = find_branch(drive, task["branch_id"])
    target = cmd["target"] or {}
    if branch is None or branch["status"] != BranchStatus.WAITING:
        reopen(cmd)
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="BRANCH_ENDED")
        return Settle(CommandStatus.REJECTED, "BRANCH_ENDED: the task's branch is no longer waiting")
    received(drive, cmd)
    try:
        with drive.savepoint():
            outcome = continue_in_branch(drive, branch, lambda: decisions.apply_decision(drive, task, target))
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


def drain_waiting_branches(drive: Drive) -> None:
    """A run returned to its join without driving its branches (a retry of a run that failed
    while it waited there): apply the parked signals each waiting branch's wait accepts, as a
    segment that reached those waits would have, then decide the join and go on."""
    plan = drive.plan
    assert plan is not None
    wait = drive.run["wait"] or {}
    fork = plan.steps.get(str(wait.get("fork") or ""))
    if wait.get("kind") != "join" or not isinstance(fork, p.ForkStep) or not int(drive.run["open_signals"] or 0):
        return  # not at a join, or nothing parked (a parked signal holds an open-signal slot)
    join = join_step(plan, fork)
    for branch in fork_branches(drive.run["id"], fork.id):
        if branch["status"] == BranchStatus.WAITING and (branch["wait"] or {}).get("kind") == "signal":
            drive_branch(drive, branch, join, lambda: WAIT)
            if drive.run["status"] not in (RunStatus.WAITING, RunStatus.RUNNING):
                return  # an `end` in the branch terminated the run
    driver.after_drive(drive, decide_join(drive, fork.id))
