"""Fork/join: branch tokens, branch-addressed signals, completions and timers, the join.

A fork dispatches one branch per listed start step. Each branch is a path through the
graph with waits of its own, driven by the ordinary nodes on its own copy of the state
(``Drive.in_branch``). A branch ends when its path reaches the fork's join step (or a
``complete``), or fails at a ``fail`` step. The join is decided once (compare-and-set on the
join row) under its policy — ``all``, ``any`` or ``n-of-m`` — then the reducer folds the
branch results into the instance state and the run continues after the join, or routes to
``onFailure`` (or fails) when the policy can no longer be met. Branches still open when the
join decides are superseded: their approvals withdrawn, timers disarmed, parks closed.
"""

from __future__ import annotations

import copy
from typing import Any

from workflows.definitions import plan as p
from workflows.engine import db, driver, segment, waits
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.evaluate import apply_set
from workflows.engine.nodes.base import BRANCH_DONE, END, WAIT, Outcome

BRANCH_COLUMNS = "id, run_id, fork_step, branch_id, generation, status, current_step, wait, state, result, attempts"


def _branches(run_id: Any, fork_step: str) -> list[dict[str, Any]]:
    return db.fetchdicts(
        f"SELECT {BRANCH_COLUMNS} FROM workflow_branches WHERE run_id = %s AND fork_step = %s ORDER BY id",
        [run_id, fork_step],
    )


def _save_branch(branch: dict[str, Any]) -> None:
    db.execute(
        "UPDATE workflow_branches SET status = %s, current_step = %s, wait = %s, state = %s, result = %s, "
        "attempts = %s, updated_at = now() WHERE id = %s",
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


def _join_step(plan: p.Plan, fork: p.ForkStep) -> p.JoinStep:
    join = plan.steps.get(fork.join)
    if not isinstance(join, p.JoinStep):
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: fork {fork.id} has no join step")
    return join


def execute_fork(drive: Drive, step: p.ForkStep) -> Outcome:
    plan = drive.plan
    assert plan is not None
    if drive.branch is not None:
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: fork {step.id} inside a branch is not supported")
    join = _join_step(plan, step)
    required = {"all": len(step.branches), "any": 1}.get(join.policy, join.count or len(step.branches))
    base = copy.deepcopy(drive.run["state"])
    # a fork entered again (a loop) starts a new generation of its branches and join
    db.execute("DELETE FROM workflow_joins WHERE run_id = %s AND fork_step = %s", [drive.run["id"], step.id])
    db.execute(
        "UPDATE workflow_branches SET status = 'SUPERSEDED', generation = generation + 1, branch_id = branch_id || "
        "'#' || id WHERE run_id = %s AND fork_step = %s",
        [drive.run["id"], step.id],
    )
    db.execute(
        "INSERT INTO workflow_joins (run_id, fork_step, join_step, policy, required, decided, outcome, base) "
        "VALUES (%s,%s,%s,%s,%s,false,'',%s)",
        [drive.run["id"], step.id, join.id, join.policy, required, db.jsonb(base)],
    )
    for start in step.branches:
        db.execute(
            "INSERT INTO workflow_branches (run_id, fork_step, branch_id, generation, status, current_step, wait, "
            "state, result, attempts, created_at, updated_at) VALUES (%s,%s,%s,1,'RUNNING',%s,NULL,%s,NULL,0,now(),"
            "now())",
            [drive.run["id"], step.id, start, start, db.jsonb(base)],
        )
    drive.decide(step=step.id, outcome="fork-dispatched")
    waits.enter(drive, step=join.id, kind="join", park_kind="JOIN", outcome="wait-join", fork=step.id)
    drive.run["current_step"] = step.id
    for branch in _branches(drive.run["id"], step.id):
        if branch["status"] == "RUNNING":
            start = branch["current_step"]
            _drive_branch(drive, branch, join, lambda start=start: driver.run_from(drive, start))
            if drive.run["status"] not in ("WAITING", "RUNNING"):
                return END  # an `end` inside a branch terminated the run
    return decide_join(drive, step.id)


def _drive_branch(drive: Drive, branch: dict[str, Any], join: p.JoinStep, body: Any) -> None:
    with drive.in_branch(branch, join.id):
        outcome = body()
        if outcome is WAIT:
            # the parked signals this branch's wait accepts (addressed to it, or to the run);
            # one may carry the branch on to its join, which the lines below then record
            outcome = driver.drain_parked(drive)
    while branch["status"] == "FAILED" and _retry_branch(drive, branch):
        start = branch["current_step"]
        with drive.in_branch(branch, join.id):
            outcome = driver.run_from(drive, start)
            if outcome is WAIT:
                outcome = driver.drain_parked(drive)
    if outcome is BRANCH_DONE and branch["status"] not in ("FAILED",):
        branch["status"] = "COMPLETED"
        branch["result"] = branch["state"]
        drive.history.add(
            "BRANCH_COMPLETED",
            step=join.id,
            branch_id=branch["branch_id"],
            command_id=drive.command_id,
            actor=drive.actor,
        )
    elif branch["status"] == "FAILED":
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
    join_row = db.fetchdict(
        "SELECT base FROM workflow_joins WHERE run_id = %s AND fork_step = %s", [drive.run["id"], branch["fork_step"]]
    )
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
        status="RUNNING",
        attempts=attempt,
        current_step=branch["branch_id"],  # a branch is named by its first step
        wait=None,
        result=None,
        state=copy.deepcopy(join_row["base"] if join_row else drive.run["state"]),
    )
    return True


def _supersede(drive: Drive, branches: list[dict[str, Any]]) -> None:
    from workflows.engine import teardown

    superseded = [b for b in branches if b["status"] in ("RUNNING", "WAITING")]
    # the runs these branches called go first, while their waits still name them
    teardown.cancel_branch_children(drive, superseded, reason="branch superseded")
    for b in branches:
        if b["status"] not in ("RUNNING", "WAITING"):
            continue
        waits.close_branch_wait(drive, b["wait"], "superseded")
        tasks = db.fetchdicts(
            "UPDATE workflow_tasks SET status = 'WITHDRAWN', reservation_owner = NULL, closed_at = now(), "
            "updated_at = now() WHERE run_id = %s AND branch_id = %s AND status IN ('OPEN','COMPLETING') "
            "RETURNING id, step",
            [drive.run["id"], b["branch_id"]],
        )
        for t in tasks:
            drive.history.add(
                "TASK_WITHDRAWN",
                step=t["step"],
                branch_id=b["branch_id"],
                actor=drive.actor,
                command_id=drive.command_id,
                payload={"task": str(t["id"])},
            )
        b["status"], b["wait"] = "SUPERSEDED", None
        _save_branch(b)


def decide_join(drive: Drive, fork_step: str) -> Outcome:
    """Decide the join once its policy is met or can no longer be met; else keep waiting."""
    plan = drive.plan
    assert plan is not None
    join_row = db.fetchdict(
        "SELECT id, join_step, policy, required, decided, base FROM workflow_joins WHERE run_id = %s "
        "AND fork_step = %s FOR UPDATE",
        [drive.run["id"], fork_step],
    )
    if join_row is None or join_row["decided"]:
        return WAIT
    branches = _branches(drive.run["id"], fork_step)
    live = [b for b in branches if b["status"] != "SUPERSEDED"]
    done = [b for b in live if b["status"] == "COMPLETED"]
    failed = [b for b in live if b["status"] == "FAILED"]
    active = [b for b in live if b["status"] in ("RUNNING", "WAITING")]
    required = int(join_row["required"])
    policy = join_row["policy"]
    if policy == "all":
        met, impossible = len(done) == len(live), bool(failed)
    else:
        met, impossible = len(done) >= required, len(done) + len(active) < required
    if not met and not impossible:
        return WAIT
    outcome = "joined" if met else "join-failed"
    updated = db.execute(
        "UPDATE workflow_joins SET decided = true, outcome = %s, decided_at = now() WHERE id = %s AND NOT decided",
        [outcome, join_row["id"]],
    )
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
    from workflows.engine import teardown

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


def _find_branch(drive: Drive, branch_id: str) -> dict[str, Any] | None:
    rows = db.fetchdicts(
        f"SELECT {BRANCH_COLUMNS} FROM workflow_branches WHERE run_id = %s AND branch_id = %s "
        "ORDER BY id DESC LIMIT 1 FOR UPDATE",
        [drive.run["id"], branch_id],
    )
    return rows[0] if rows else None


def _continue_in_branch(drive: Drive, branch: dict[str, Any], body: Any) -> Outcome:
    plan = drive.plan
    assert plan is not None
    fork = plan.steps.get(branch["fork_step"])
    assert isinstance(fork, p.ForkStep)
    join = _join_step(plan, fork)
    _drive_branch(drive, branch, join, body)
    if drive.run["status"] not in ("WAITING", "RUNNING"):
        return END
    return decide_join(drive, fork.id)


def apply_branch_signal(drive: Drive, cmd: dict[str, Any]) -> segment.Settle:
    target = cmd["target"] or {}
    name, branch_id = target.get("name", ""), target.get("branch", "")
    branch = _find_branch(drive, branch_id)
    if branch is None or branch["status"] in segment.BRANCH_ENDED:
        drive.history.add(
            "COMMAND_STALE",
            command_id=cmd["id"],
            actor=drive.actor,
            outcome="BRANCH_ENDED",
            branch_id=branch_id if segment.named(branch_id) == branch_id else "",
        )
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
        return segment.Settle("STALE", "BRANCH_ENDED: the addressed branch has ended")
    wait = branch["wait"]
    if (
        branch["status"] != "WAITING"
        or not driver.accepts(wait, name)
        or driver.deadline_blocked(drive.run["id"], wait or {}, cmd["recorded_at"])
    ):
        drive.history.add(
            "SIGNAL_PARKED",
            command_id=cmd["id"],
            actor=drive.actor,
            branch_id=branch["branch_id"],
            payload={"signal": segment.named(name)},
        )
        return segment.Settle("PARKED")
    try:
        with drive.savepoint():
            drive.history.add(
                "SIGNAL_RECEIVED",
                command_id=cmd["id"],
                actor=drive.actor,
                branch_id=branch["branch_id"],
                payload={"signal": segment.named(name), "payload": cmd["payload"]},
            )
            outcome = _continue_in_branch(
                drive, branch, lambda: driver.apply_signal(drive, name=name, payload=cmd["payload"])
            )
    except (DeterministicFailure, StepLimitExceeded) as exc:
        reason = segment._failure_reason(exc)
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome=reason.split(":")[0])
        drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
        return segment.Settle("REJECTED", reason)
    drive.run["open_signals"] = max(0, int(drive.run["open_signals"]) - 1)
    segment._after_drive(drive, outcome)
    return segment._completed(drive, cmd)


def route_instance_signal(drive: Drive, cmd: dict[str, Any]) -> segment.Settle | None:
    """An instance-addressed signal while the run waits at a join: deliver it to the one
    waiting branch that accepts it (None when there is not exactly one)."""
    wait = drive.run["wait"] or {}
    if wait.get("kind") != "join":
        return None
    name = (cmd["target"] or {}).get("name", "")
    waiting = [
        b
        for b in _branches(drive.run["id"], wait.get("fork", ""))
        if b["status"] == "WAITING" and driver.accepts(b["wait"], name)
    ]
    if len(waiting) != 1:
        return None
    routed = dict(cmd)
    routed["target"] = {**(cmd["target"] or {}), "branch": waiting[0]["branch_id"]}
    return apply_branch_signal(drive, routed)


def apply_branch_completion(drive: Drive, cmd: dict[str, Any], task: dict[str, Any]) -> segment.Settle:
    branch = _find_branch(drive, task["branch_id"])
    target = cmd["target"] or {}
    if branch is None or branch["status"] != "WAITING":
        segment._reopen(cmd)
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome="BRANCH_ENDED")
        return segment.Settle("REJECTED", "BRANCH_ENDED: the task's branch is no longer waiting")
    segment._received(drive, cmd)
    try:
        with drive.savepoint():
            outcome = _continue_in_branch(drive, branch, lambda: segment.apply_decision(drive, task, target))
    except (DeterministicFailure, StepLimitExceeded) as exc:
        reason = segment._failure_reason(exc)
        segment._reopen(cmd)
        drive.history.add("COMMAND_REJECTED", command_id=cmd["id"], actor=drive.actor, outcome=reason.split(":")[0])
        return segment.Settle("REJECTED", reason)
    segment._after_drive(drive, outcome)
    return segment._completed(drive, cmd)


def apply_branch_timer(drive: Drive, cmd: dict[str, Any], timer: dict[str, Any]) -> segment.Settle:
    branch = _find_branch(drive, timer["branch_id"])
    if branch is None or branch["status"] != "WAITING":
        db.execute("UPDATE workflow_timers SET status = 'STALE' WHERE id = %s", [timer["id"]])
        drive.history.add("COMMAND_STALE", command_id=cmd["id"], actor=drive.actor, outcome="BRANCH_ENDED")
        return segment.Settle("STALE", "BRANCH_ENDED: the timer's branch is no longer waiting")
    result: dict[str, Any] = {}

    def body() -> Any:
        settle = segment.fire_timer(drive, cmd, timer)
        result["settle"] = settle
        return result.get("outcome", WAIT) if settle.status != "COMPLETE" else drive.last_outcome

    outcome = _continue_in_branch(drive, branch, body)
    settle: segment.Settle = result["settle"]
    if settle.status != "COMPLETE":
        return settle
    segment._after_drive(drive, outcome)
    return settle


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
    join = _join_step(plan, fork)
    for branch in _branches(drive.run["id"], fork.id):
        if branch["status"] == "WAITING" and (branch["wait"] or {}).get("kind") == "signal":
            _drive_branch(drive, branch, join, lambda: WAIT)
            if drive.run["status"] not in ("WAITING", "RUNNING"):
                return  # an `end` in the branch terminated the run
    segment._after_drive(drive, decide_join(drive, fork.id))


def install() -> None:
    segment.branch_handler = apply_branch_signal
    segment.join_drainer = drain_waiting_branches
    segment.instance_signal_router = route_instance_signal
    segment.completion_branch_handler = apply_branch_completion
    segment.timer_branch_handler = apply_branch_timer
    driver.register_node(p.ForkStep, execute_fork)
    driver.register_node(p.JoinStep, _join_reached)


def _join_reached(drive: Drive, step: p.JoinStep) -> Outcome:
    # only a branch's path reaches a join, and the driver stops it there first
    raise DeterministicFailure(f"DETERMINISTIC_FAILURE: join {step.id} reached outside its fork")
