"""The state of one transaction's work on a run: the locked row, its plan, the history buffer.

A segment (or an inline recording drive such as cancel) creates one ``Drive``, mutates the
run dict, appends history, and ``save()``s the row once at the end. ``savepoint()`` wraps a
database savepoint and restores the in-memory row and history buffer when it rolls back.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from django.db import transaction

from workflows.definitions.plan import Plan
from workflows.engine import db, pipeline, sql
from workflows.engine.actors import Actor
from workflows.engine.history import HistoryBuffer, _same
from workflows.engine.rows import RunRow
from workflows.models import ENDED_STATUSES, BranchStatus, RunStatus

SQL = sql.load("context")

# the run row's keys a drive changes (a savepoint restores them)
Mutable = Literal[
    "status",
    "state",
    "state_version",
    "current_step",
    "wait",
    "subject_type",
    "subject_id",
    "subject_version",
    "failure_code",
    "failure_message",
    "compensation",
    "next_seq",
    "open_signals",
    "cancel_reason",
    "ended_at",
]
MUTABLE: tuple[Mutable, ...] = get_args(Mutable)
# what a branch drive swaps into the run row (``Drive.in_branch``)
BRANCH_SWAPPED: tuple[Mutable, ...] = ("state", "wait", "current_step", "status")


class StepLimitExceeded(Exception):
    """More than MAX_STEPS_PER_SEGMENT nodes without a wait."""


class DeadlineExceeded(Exception):
    """The segment ran past its deadline (one margin before the lease ends)."""


class RedoWithSavepoints(BaseException):
    """Something escaped a savepoint of an optimistic drive (see ``Drive.savepoint``): the
    segment's transaction rolls back whole and the segment runs again with real savepoints.
    A BaseException, so no ``except Exception`` on the way up mistakes it for a failure."""


class InitialisationFailed(Exception):
    """The application's initial state or subject resolver failed in a start's segment: the
    segment rolls back, the run stays PENDING and the claim lapses, so the start is claimed
    again (its attempts bound the retries; a START that spends them fails its run)."""

    def __init__(self, field: str) -> None:
        super().__init__(f"the {field} of the run failed")
        self.field = field


class DeterministicFailure(Exception):
    """The application failed deterministically (payload, callback, expression, definition).

    ``reason`` is framework text (never exception text or payload values).
    """

    def __init__(
        self, reason: str, code: str = "DETERMINISTIC_FAILURE", *, detail: dict[str, str] | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        # where and why, for the history entry of the failure: {"step", "field", "reason"}
        self.detail = detail


def step_failed(step: str, field: str, why: str, code: str = "DETERMINISTIC_FAILURE") -> DeterministicFailure:
    """The failure of one field of one step: ``<code>: <field> of step <step> failed: <why>``.

    ``field`` names the place in the step as the document spells it (``set.total``,
    ``routes.1.when``, ``due.at``, ``title placeholder 2``); ``why`` is framework text (never
    exception text or a value)."""
    return DeterministicFailure(
        f"{code}: {field} of step {step} failed: {why}",
        code,
        detail={"step": step, "field": field, "reason": why},
    )


@dataclass
class Drive:
    run: RunRow
    plan: Plan | None
    history: HistoryBuffer
    actor: Actor
    command_id: int | None = None
    command_kind: str = ""
    token: Any = None  # the claim token of the executing command (effect markers carry it)
    resolved_effect: str = ""  # a step whose effect an administrator resolved as done
    executor_id: str = ""
    max_steps: int = 1000
    deadline: float | None = None  # time.monotonic() value
    steps: int = 0
    effects: list[Any] = field(default_factory=list)  # after-commit work (intent ids)
    ended_now: bool = False
    resumed_parent: bool = False
    branch: dict[str, Any] | None = None  # the branch row being driven (fork/join), else None
    branch_join: str = ""  # the join step that ends the branch's path
    last_outcome: Any = None  # the outcome of the latest drive (timers hand it to their caller)
    # savepoints are taken only when something escapes them: a segment's first attempt (see
    # ``savepoint``); inline drives in a caller's transaction always take them
    optimistic: bool = False
    # what the run still holds, read with the leaving of its wait when the drive goes straight
    # on to end the run (``waits.leave``); consumed by ``teardown.end_run``
    open_things: dict[str, bool] | None = None
    # a COMPLETION's: what the run holds besides the task it decides and its wait's park, read
    # with the run's lock (``locks.try_lock_run_with_command``)
    open_things_beside: dict[str, bool] | None = None
    # a MIGRATION move's: who held the approvals it withdrew (``outbox.digest.Moved``); an
    # approval the target node reopens for them sends no "New task" notice
    moved: Any = None

    @classmethod
    def for_run(cls, run: RunRow, plan: Plan | None, actor: Actor, **kwargs: Any) -> Drive:
        history = HistoryBuffer(
            run_id=run["id"],
            next_seq=int(run["history_seq"]) + 1,
            scope=run["scope"],
            definition_id=run["definition_id"],
            version=run["version"],
            plan_hash=run["plan_hash"],
            executor_id=kwargs.get("executor_id", ""),
            state_source=lambda: run.get("state"),
            business_key=run.get("business_key"),
        )
        return cls(run=run, plan=plan, history=history, actor=actor, **kwargs)

    # --- budget ----------------------------------------------------------------------
    def count_step(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise StepLimitExceeded()
        self.check_deadline()

    def check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineExceeded()

    # --- state -----------------------------------------------------------------------
    def set_state(self, new_state: Any) -> tuple[Any, int, int]:
        """Replace the state; answers (before, version_before, version_after)."""
        before = self.run["state"]
        version_before = int(self.run["state_version"])
        if _same(before, new_state):
            return before, version_before, version_before
        if self.branch is not None:
            # a branch works on its own copy: the instance state (and its version) changes
            # only when the join folds the results in
            self.run["state"] = new_state
            return before, version_before, version_before
        self.run["state"] = new_state
        self.run["state_version"] = version_before + 1
        return before, version_before, version_before + 1

    def decide(
        self, *, step: str, outcome: str, new_state: Any = None, change: bool = False, branch_id: str = ""
    ) -> None:
        """Log a DECISION (with the state change when ``change``)."""
        if change:
            before, vb, va = self.set_state(new_state)
        else:
            before, vb, va = self.run["state"], int(self.run["state_version"]), int(self.run["state_version"])
        self.history.decision(
            step=step,
            outcome=outcome,
            before=before,
            after=self.run["state"],
            version_before=vb,
            version_after=va,
            command_id=self.command_id,
            actor=self.actor,
            branch_id=branch_id or self.branch_id,
            local=self.branch is not None,
        )

    @property
    def branch_id(self) -> str:
        return str(self.branch["branch_id"]) if self.branch is not None else ""

    @contextmanager
    def in_branch(self, branch: dict[str, Any], join_step: str) -> Iterator[None]:
        """Drive a branch with the ordinary nodes: its state, wait, step and status are swapped
        into the run dict for the duration and written back to the branch row afterwards."""
        saved = {k: self.run[k] for k in BRANCH_SWAPPED}
        self.run["state"] = branch["state"]
        self.run["wait"] = branch["wait"]
        self.run["current_step"] = branch["current_step"]
        self.run["status"] = RunStatus.WAITING if branch["status"] == BranchStatus.WAITING else RunStatus.RUNNING
        self.branch, self.branch_join = branch, join_step
        try:
            yield
        finally:
            branch["state"] = self.run["state"]
            branch["wait"] = self.run["wait"]
            branch["current_step"] = self.run["current_step"]
            run_status = self.run["status"]
            if branch["status"] in (BranchStatus.RUNNING, BranchStatus.WAITING):
                branch["status"] = BranchStatus.WAITING if run_status == RunStatus.WAITING else BranchStatus.RUNNING
            self.branch, self.branch_join = None, ""
            ended = run_status in ENDED_STATUSES
            self._restore(saved)
            if ended:  # an `end` inside the branch terminated the whole run
                self.run["status"] = run_status
                self.run["wait"] = None
                if branch["status"] in (BranchStatus.RUNNING, BranchStatus.WAITING):
                    # the teardown cancelled every open branch, this one included: its row
                    # is written back after this and must not say it still runs
                    branch["status"] = BranchStatus.CANCELLED

    # --- savepoints ------------------------------------------------------------------
    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Writes inside roll back alone when an exception escapes (the caller then settles the
        command as rejected, and the transaction goes on).

        An optimistic drive (a segment's first attempt) sends no SAVEPOINT: almost every
        block completes, and a savepoint costs two round trips. When something does escape,
        it raises ``RedoWithSavepoints`` instead: the whole segment rolls back and runs again
        with real savepoints (``segment.run``), which ends exactly as a first attempt with
        savepoints would have. A deadline overrun is not redone: it ends the segment anyway."""
        if self.optimistic:
            try:
                yield
            except DeadlineExceeded:
                raise
            except Exception as exc:
                raise RedoWithSavepoints() from exc
            return
        snapshot = {k: copy.deepcopy(self.run[k]) for k in MUTABLE}
        mark = self.history.mark()
        steps = self.steps
        effects = len(self.effects)
        ended = self.ended_now
        branch = copy.deepcopy(self.branch) if self.branch is not None else None
        try:
            with transaction.atomic():
                yield
        except BaseException:
            self.open_things = None
            self._restore(snapshot)
            self.history.truncate(mark)
            self.steps = steps
            del self.effects[effects:]
            self.ended_now = ended
            if branch is not None and self.branch is not None:
                self.branch.update(branch)
            raise

    def _restore(self, saved: dict[Mutable, Any]) -> None:
        """Put back run keys saved before a savepoint or a branch drive."""
        for key, value in saved.items():
            self.run[key] = value

    # --- persistence -----------------------------------------------------------------
    def save_and_commit(self, settlement: tuple[str, list[Any]]) -> bool:
        """A segment's end: the settlement (fenced on the claim), the history and the run row
        as one statement, and the commit, in one round trip. False (nothing committed) when
        the settlement updated no row: the claim no longer stands."""
        return db.execute_fenced_and_commit(self._statements(settlement))

    def save(self, *, first: tuple[str, list[Any]] | None = None) -> int:
        """Write the history and the run row in one round trip. ``first`` (the command's
        settlement) runs before them and its rowcount is answered."""
        return pipeline.execute_batch(self._statements(first))

    def _statements(self, first: tuple[str, list[Any]] | None) -> list[tuple[str, Any]]:
        statements: list[tuple[str, Any]] = [first] if first is not None else []
        history = self.history.flush_statement()
        if history is not None:
            statements.append(history)
        self.run["history_seq"] = self.history.next_seq - 1
        r = self.run
        statements.append(
            (
                SQL.save_run,
                [
                    r["status"],
                    db.jsonb(r["state"]),
                    r["state_version"],
                    r["current_step"],
                    db.jsonb(r["wait"]),
                    r["subject_type"] or "",
                    r["subject_id"] or "",
                    r["subject_version"] or "",
                    r["failure_code"] or "",
                    (r["failure_message"] or "")[:4000],
                    db.jsonb(r["compensation"]),
                    r["next_seq"],
                    r["open_signals"],
                    r["history_seq"],
                    r["cancel_reason"] or "",
                    r["ended_at"],
                    r["scope"],
                    r["version"],
                    r["plan_hash"],
                    r["id"],
                ],
            )
        )
        return statements
