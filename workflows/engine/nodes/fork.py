"""``fork``: dispatch one branch per listed start step, drive each until it waits or reaches
the join, then decide the join (the branch machinery is ``engine/forks.py``)."""

from __future__ import annotations

import copy

from workflows.definitions.plan import ForkStep
from workflows.engine import db, sql, waits
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.nodes.base import END, Outcome
from workflows.models import BranchStatus, ParkKind, RunStatus

SQL = sql.load("nodes")


def execute(drive: Drive, step: ForkStep) -> Outcome:
    # a true cycle: the driver executes this node, and this node drives its branches with the
    # driver (through the fork/join coordinator)
    from workflows.engine import driver, forks

    plan = drive.plan
    assert plan is not None
    if drive.branch is not None:
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: fork {step.id} inside a branch is not supported")
    join = forks.join_step(plan, step)
    required = {"all": len(step.branches), "any": 1}.get(join.policy, join.count or len(step.branches))
    base = copy.deepcopy(drive.run["state"])
    # a fork entered again (a loop) starts a new generation of its branches and join
    db.execute(SQL.delete_join, [drive.run["id"], step.id])
    db.execute(SQL.supersede_branches, [drive.run["id"], step.id])
    db.execute(SQL.insert_join, [drive.run["id"], step.id, join.id, join.policy, required, db.jsonb(base)])
    for start in step.branches:
        db.execute(SQL.insert_branch, [drive.run["id"], step.id, start, start, db.jsonb(base)])
    drive.decide(step=step.id, outcome="fork-dispatched")
    waits.enter(drive, step=join.id, kind="join", park_kind=ParkKind.JOIN, outcome="wait-join", fork=step.id)
    drive.run["current_step"] = step.id
    for branch in forks.fork_branches(drive.run["id"], step.id):
        if branch["status"] == BranchStatus.RUNNING:
            start = branch["current_step"]
            forks.drive_branch(drive, branch, join, lambda start=start: driver.run_from(drive, start))
            if drive.run["status"] not in (RunStatus.WAITING, RunStatus.RUNNING):
                return END  # an `end` inside a branch terminated the run
    return forks.decide_join(drive, step.id)
