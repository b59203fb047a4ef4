"""The executor: peek claimable heads, claim (short transaction), run a segment, settle.

Celery only delivers wake-ups; this module decides everything from the database:
``FOR UPDATE SKIP LOCKED`` peeks, ``NOWAIT`` execution locks, tokens and database-timed
leases. A lost, repeated or late wake-up never loses or doubles work.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from workflows import conf
from workflows.definitions.plan import Plan
from workflows.engine import (
    db,
    effects,
    faults,
    locks,
    observers,
    outbox,
    outcomes,
    pipeline,
    rows,
    segment,
    settlement,
    sql,
    wakeups,
)
from workflows.engine.context import DeadlineExceeded, DeterministicFailure, InitialisationFailed, StepLimitExceeded
from workflows.engine.rows import CommandRow, RunRow
from workflows.exceptions import (
    DefinitionError,
    InstanceNotFound,
    UnknownTypeName,
    VersionNotRunnable,
    WorkflowError,
)
from workflows.models import ENDED_STATUSES, LIVE_STATUSES, CommandKind, CommandStatus, RunStatus

log = logging.getLogger("workflows.engine")

NODE_ID = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"

SQL = sql.load("executor")
_HEAD_FOR_CLAIM = rows.with_columns(SQL.head_for_claim)
_CLAIMED_COMMAND = rows.with_columns(SQL.claimed_command)


@dataclass
class Head:
    id: int
    run_id: Any
    kind: str
    target: Any
    scope: str
    definition_id: str
    version: int
    plan_hash: str
    run_status: str


settled = observers.settled


def executor_id() -> str:
    return f"{NODE_ID}-{os.getpid()}"


def peek(limit: int, run_id: Any = None, *, min_age_seconds: float = 0.0) -> list[Head]:
    """Claimable heads (of one run, or of all). ``min_age_seconds``: only heads available at
    least that long (the sweep leaves fresh ones to the wake-ups already on their way)."""
    if run_id is not None:
        found = db.fetchdicts(_PEEK_RUN, [run_id, limit], prepared=True)
    elif min_age_seconds > 0:
        found = db.fetchdicts(_PEEK_AGED, [min_age_seconds, limit])
    else:
        found = db.fetchdicts(_PEEK_ALL, [limit])
    return [Head(**r) for r in found]


_PEEK_RUN = SQL.peek.format(run_filter="AND c.run_id = %s")
_PEEK_AGED = SQL.peek.format(run_filter="AND c.available_at <= now() - make_interval(secs => %s)")
_PEEK_ALL = SQL.peek.format(run_filter="")


def _plan_for(head: Head) -> Plan | None:
    """The pinned plan, or None when this node cannot run it (the command is deferred)."""
    from workflows.definitions import cache

    try:
        plan = cache.get_plan(
            scope=head.scope, definition_id=head.definition_id, version=head.version, expected_hash=head.plan_hash
        )
    except VersionNotRunnable:
        return None
    except DefinitionError as error:
        _judged(head, NAME_BINDING_UNRESOLVED if error.code == UnknownTypeName.code else None, deferred=True)
        return None
    _judged(head, None, deferred=False)
    if head.kind == CommandKind.MIGRATION and not _target_resident(head):
        return None
    return plan


# --- failing scope rows (engine.txt, "Failing scope rows") -----------------------------------
# Each node judges a non-default scope's row by the plan it builds against the code it ships:
# a named schema or callback that no longer resolves builds no plan (the command is deferred,
# no attempt spent) and marks the row NAME_BINDING_UNRESOLVED; a row that builds clears the
# mark. The write is a statement of its own after the deferral or the segment, best effort;
# the mark feeds the definition listing and refuses nothing. The reference's other rule,
# STATE_TYPE_NOT_EXTENDED, has no counterpart here (docs/operations.md, "Failing scope rows").
NAME_BINDING_UNRESOLVED = "NAME_BINDING_UNRESOLVED"
_marks_written: dict[tuple[str, str, int], str] = {}  # what this process last wrote per row


def _judged(head: Head, failure: str | None, *, deferred: bool) -> None:
    from workflows.definitions.store import DEFAULT_SCOPE

    key = (head.scope, head.definition_id, head.version)
    if head.scope == DEFAULT_SCOPE or _marks_written.get(key) == (failure or ""):
        return  # a default scope row is never marked; once written, later commands write nothing
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _write_mark(key, failure))
    elif deferred:
        _pending_marks[key] = failure  # written once the deferral has committed (``defer``)
    else:
        _write_mark(key, failure)


_pending_marks: dict[tuple[str, str, int], str | None] = {}


def _write_mark(key: tuple[str, str, int], failure: str | None) -> None:
    from workflows.definitions import lifecycle

    scope, definition_id, version = key
    try:
        lifecycle.record_failure(scope=scope, definition_id=definition_id, version=version, failure=failure)
    except (DatabaseError, WorkflowError):  # best effort: the command's outcome stands, the next judgement writes again
        log.warning("could not write the failure mark of scope=%r id=%r version=%s", scope, definition_id, version)
        return
    _marks_written[key] = failure or ""


def _target_resident(head: Head) -> bool:
    """A migration also needs its target plan; a node that cannot build it defers the command.
    A target row that is not published is no build failure: the segment rejects it."""
    from workflows.definitions import cache

    target = head.target if isinstance(head.target, dict) else {}
    try:
        cache.get_plan(
            scope=str(target.get("scope") or head.scope),
            definition_id=head.definition_id,
            version=int(target.get("version")),  # type: ignore[arg-type]
        )
    except (VersionNotRunnable, TypeError, ValueError):
        return True
    except DefinitionError:
        return False
    return True


# The claim's commit is asynchronous (``synchronous_commit`` off for that one statement): the
# segment that follows commits synchronously and its WAL record comes after the claim's, so a
# durable segment implies a durable claim; a claim lost in a server crash is a claim that never
# happened (the command is still PENDING, no attempt spent). The set_config sits in the run's
# CTE, so it applies only when the statement is its own transaction (see ``_claim_statement``).
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"
# A wake-up names a run: CLAIM_RUN_HEAD try-locks it, picks its head and claims it in one
# statement, which also answers the run's pin (for the plan). It also writes the delivered
# marks this process carries (``outbox.take_marks``, through ``workflow_outbox_delivered``:
# migration 0010), and fails with them.
CLAIM_FAST = SQL.claim_fast
CLAIM_RUN_HEAD = SQL.claim_run_head


def _claim_statement(statement: str, params: Any) -> dict[str, Any] | None:
    """A one-statement claim: its own transaction when none is open (one round trip, an
    asynchronous commit); inside a caller's transaction a savepoint keeps a busy lock from
    aborting it. Raises ``DatabaseError`` (a busy run gives LOCK_NOT_AVAILABLE)."""
    if connection.in_atomic_block:
        with transaction.atomic():
            return db.fetchdict(statement.format(async_commit="NULL"), params, prepared=True)
    return db.fetchdict(statement.format(async_commit=ASYNC_COMMIT), params, prepared=True)


# what ``_claim`` answers for a head it settled (or dead-lettered) at its claim: progress,
# nothing to run
SETTLED_AT_CLAIM = "SETTLED"


def claim(head: Head, *, lease_seconds: int, max_attempts: int) -> Any | None:
    """Claim a head. The common case is one autocommitted statement (try-lock the live run,
    re-check the head, spend an attempt, token and database-timed lease); anything else —
    an ended or failed run, spent attempts — takes the full transaction below.

    Answers the claim token, or None when nothing is to be run (busy, gone, settled here).
    """
    token = _claim(head, lease_seconds=lease_seconds, max_attempts=max_attempts)
    return None if token == SETTLED_AT_CLAIM else token


def _claim(head: Head, *, lease_seconds: int, max_attempts: int) -> Any | None:
    """``claim``, telling a head settled at its claim (``SETTLED_AT_CLAIM``: the drain goes on
    to the run's next command) from nothing done (None: busy or gone)."""
    token = uuid.uuid4()
    try:
        row = _claim_statement(CLAIM_FAST, [head.run_id, token, executor_id(), lease_seconds, head.id, max_attempts])
    except DatabaseError as exc:
        if db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
            return None
        raise
    if row is not None:
        return token
    return _claim_slow(head, lease_seconds=lease_seconds, max_attempts=max_attempts)


def _claim_slow(head: Head, *, lease_seconds: int, max_attempts: int) -> Any | None:
    with transaction.atomic():
        try:
            run = locks.try_lock_run(head.run_id)
        except InstanceNotFound:  # purged since it was peeked
            return None
        if run is None:
            return None
        cmd = cast(CommandRow | None, db.fetchdict(_HEAD_FOR_CLAIM, [head.id]))
        if cmd is None:
            return None
        decision = segment.outcome_of(run, cmd)
        if decision in (outcomes.REJECT, outcomes.STALE, outcomes.CANCEL):
            _settle_at_claim(run, cmd, decision)
            return SETTLED_AT_CLAIM
        if cmd["attempts"] >= max_attempts:
            _dead_letter(run, cmd)
            return SETTLED_AT_CLAIM
        token = uuid.uuid4()
        db.execute(SQL.claim, [token, executor_id(), lease_seconds, cmd["id"]])
        return token


def _settle_at_claim(run: RunRow, cmd: CommandRow, decision: str) -> None:
    from workflows.engine.context import Drive

    drive = Drive.for_run(run, None, settlement.actor_of(cmd), command_id=cmd["id"], executor_id=executor_id())
    settle = segment.settle_by_outcome(drive, cmd, decision)
    drive.save()
    db.execute(SQL.settle_at_claim, [settle.status, settle.reason, cmd["id"]])
    settled(run["id"], cmd["id"], cmd["kind"], settle.status)


def _dead_letter(run: RunRow, cmd: CommandRow) -> None:
    from workflows.engine.context import Drive

    drive = Drive.for_run(run, None, settlement.actor_of(cmd), command_id=cmd["id"], executor_id=executor_id())
    drive.history.add("COMMAND_DEAD", command_id=cmd["id"], actor=drive.actor, outcome="MAX_ATTEMPTS")
    if cmd["kind"] == CommandKind.SIGNAL:
        drive.run["open_signals"] = max(0, int(run["open_signals"]) - 1)
    if cmd["kind"] == CommandKind.START and run["status"] == RunStatus.PENDING:
        run["status"] = RunStatus.FAILED
        run["failure_code"] = "MAX_ATTEMPTS"
        run["failure_message"] = "MAX_ATTEMPTS: the start failed on every attempt"
        drive.history.add("WORKFLOW_FAILED", command_id=cmd["id"], actor=drive.actor, outcome="MAX_ATTEMPTS")
    drive.save()
    db.execute(SQL.dead_letter, [f"MAX_ATTEMPTS: {cmd['attempts']} attempts spent", cmd["id"]])
    settled(run["id"], cmd["id"], cmd["kind"], CommandStatus.DEAD)


def defer(head: Head) -> int:
    """Defer a head this node cannot run: no attempt spent; 5 s doubling to 5 min."""
    with transaction.atomic():
        run = locks.try_lock_run(head.run_id)
        if run is None or (run["scope"], run["definition_id"], run["version"], run["plan_hash"]) != (
            head.scope,
            head.definition_id,
            head.version,
            head.plan_hash,
        ):
            return 0
        row = db.fetchone(SQL.defer, [head.id])
        if row is None:
            return 0
        count = int(row[0])
        if count == 1:
            from workflows.engine.actors import NONE
            from workflows.engine.context import Drive

            drive = Drive.for_run(run, None, NONE, executor_id=executor_id())
            drive.history.add(
                "COMMAND_DEFERRED", command_id=head.id, actor=NONE, payload={"kind": row[1], "seq": row[2]}
            )
            drive.save()
    observers.emit(observers.CommandDeferred(str(head.run_id), head.id, head.kind, count))
    log.warning("command %s deferred: this node cannot run %s v%s", head.id, head.definition_id, head.version)
    key = (head.scope, head.definition_id, head.version)
    if key in _pending_marks:
        failure = _pending_marks.pop(key)
        if connection.in_atomic_block:
            transaction.on_commit(lambda: _write_mark(key, failure))
        else:
            _write_mark(key, failure)
    return count


def _release(command_id: int, token: Any) -> None:
    """Return a claim whose segment did not run (busy lock) with its attempt restored."""
    db.execute(SQL.release, [command_id, token])


def _retry_transient(head: Head, token: Any, reason: str) -> None:
    settings = conf.get().EXECUTOR
    if effects.has_marker(head.id, token):
        _outcome_unknown(head, token)
        return
    row = db.fetchone(
        SQL.retry_transient,
        [reason[:4000], settings.TRANSIENT_BACKOFF_MAX_MS, settings.TRANSIENT_BACKOFF_BASE_MS, head.id, token],
    )
    if row:
        observers.emit(observers.TransientRetry(str(head.run_id), head.id, head.kind, int(row[0])))


def _outcome_unknown(head: Head, token: Any) -> None:
    if db.execute(SQL.outcome_unknown, [head.id, token]):
        settled(head.run_id, head.id, head.kind, CommandStatus.OUTCOME_UNKNOWN)


def _fail(
    head: Head, token: Any, reason: str, *, step_limit: bool, deadline: float, detail: dict[str, str] | None = None
) -> None:
    """Settle FAILED in a transaction of its own; fail the run for START/RETRY/TIMER/overruns.

    ``detail`` (where and why: step, field, reason) is the payload of the history entries, and
    its step the FAILED entry's step."""
    from workflows.engine.context import Drive

    margin = _margin()
    while True:
        with transaction.atomic():
            run = locks.try_lock_run(head.run_id)
            if run is not None:
                cmd = cast(CommandRow | None, db.fetchdict(_CLAIMED_COMMAND, [head.id, token]))
                if cmd is None:
                    return
                if effects.has_marker(head.id, token):
                    _outcome_unknown(head, token)
                    return
                drive = Drive.for_run(
                    run, None, settlement.actor_of(cmd), command_id=cmd["id"], executor_id=executor_id()
                )
                drive.history.add(
                    "COMMAND_FAILED",
                    command_id=cmd["id"],
                    actor=drive.actor,
                    outcome=reason.split(":", 1)[0],
                    payload=detail,
                )
                fails_run = step_limit or cmd["kind"] in (CommandKind.START, CommandKind.RETRY, CommandKind.TIMER)
                if cmd["kind"] == CommandKind.COMPLETION and cmd.get("task_id"):
                    settlement.reopen(cmd)
                if cmd["kind"] == CommandKind.SIGNAL:
                    run["open_signals"] = max(0, int(run["open_signals"]) - 1)
                if fails_run and run["status"] not in ENDED_STATUSES:
                    run["status"] = RunStatus.FAILED
                    run["failure_code"] = reason.split(":", 1)[0][:64]
                    run["failure_message"] = reason[:4000]
                    drive.history.add(
                        "FAILED",
                        command_id=cmd["id"],
                        actor=drive.actor,
                        outcome=reason.split(":", 1)[0],
                        step=(detail or {}).get("step") or run.get("current_step") or "",
                        payload=detail,
                    )
                    drive.history.add(
                        "WORKFLOW_FAILED", command_id=cmd["id"], actor=drive.actor, outcome=reason.split(":", 1)[0]
                    )
                    if cmd["kind"] == CommandKind.TIMER and cmd.get("timer_id"):
                        db.execute(SQL.fail_timer, [cmd["timer_id"]])
                drive.save()
                db.execute(SQL.fail_command, [reason[:4000], cmd["id"]])
                settled(head.run_id, head.id, head.kind, CommandStatus.FAILED)
                return
        if time.monotonic() > deadline + margin * 0.9:
            _release(head.id, token)
            return
        time.sleep(0.1)  # the lock is busy: poll, never wait on it


def _margin() -> float:
    return max(1.0, conf.get().EXECUTOR.LEASE_SECONDS / 10.0)


def process(head: Head) -> str:
    """Claim and run one head. Answers what happened (for logs and tests)."""
    settings = conf.get().EXECUTOR
    plan: Plan | None = None
    if head.run_status not in ENDED_STATUSES:
        plan = _plan_for(head)
        if plan is None:
            defer(head)
            return "DEFERRED"
    started = time.monotonic()
    token = _claim(head, lease_seconds=settings.LEASE_SECONDS, max_attempts=settings.MAX_ATTEMPTS)
    if token is None:
        return "SKIPPED"
    if token == SETTLED_AT_CLAIM:
        return SETTLED_AT_CLAIM  # progress: the drain looks for the run's next command at once
    return _execute(head, token, plan, started)[0]


def _execute(
    head: Head | None, token: Any, plan: Plan | None, started: float, claiming: _Claiming | None = None
) -> tuple[str, bool]:
    """Run the segment of a claimed head (``started``: the monotonic reading before the claim
    was sent, which the deadline is measured from) and dispose of its failure. Answers the
    outcome and whether the segment saw other runnable commands of the run.

    With ``claiming`` (and no head yet) the claim travels with the segment's first statements
    (``_Claiming.open``); ``NotClaimed`` comes out when it claimed nothing to run here."""
    settings = conf.get().EXECUTOR
    if claiming is None:
        faults.point("after_claim")
    margin = _margin()
    deadline = started + settings.LEASE_SECONDS - margin
    while True:
        try:
            settle = segment.run(
                command_id=head.id if head is not None else 0,
                run_id=head.run_id if head is not None else claiming.run_id,  # type: ignore[union-attr]
                token=token,
                plan=plan,
                executor_id=executor_id(),
                deadline=deadline,
                max_steps=settings.MAX_STEPS_PER_SEGMENT,
                kind=head.kind if head is not None else "",
                opening=claiming.open if head is None and claiming is not None else None,
            )
        except NotClaimed:
            raise
        except Exception as exc:
            if head is None:  # the claim travelled with the segment: did it claim?
                head, plan = claiming.head, claiming.plan  # type: ignore[union-attr]
                if head is None:
                    raise
                if plan is None and isinstance(exc, segment.Busy):
                    plan = _plan_for(head)  # now, outside the rolled-back transaction
                    if plan is None:
                        _release(head.id, token)
                        defer(head)
                        return "DEFERRED", False
            outcome = _disposed(exc, head, token, deadline, margin)
            if outcome is None:
                time.sleep(0.05)  # the run's lock is busy: poll, never wait on it
                continue
            return outcome, False
        if head is None:
            head = claiming.head  # type: ignore[union-attr]
            assert head is not None
        faults.point("after_segment_commit")
        settled(head.run_id, head.id, head.kind, settle.status, (time.monotonic() - started) * 1000)
        return settle.status, settle.more


def _disposed(exc: Exception, head: Head, token: Any, deadline: float, margin: float) -> str | None:
    """What a segment's failure comes to (None: the lock was busy and there is time to try again)."""
    if isinstance(exc, segment.Busy):
        if time.monotonic() > deadline - margin:
            _release(head.id, token)
            return "RELEASED"
        return None
    if isinstance(exc, segment.Fenced):
        return "FENCED"
    if isinstance(exc, DeadlineExceeded):
        log.debug("segment of command %s passed its deadline; the lease will lapse", head.id)
        return "DEADLINE"
    if isinstance(exc, InitialisationFailed):
        # rolled back: the run stays PENDING and the claim lapses (the attempt stays spent),
        # so the start is claimed again; the cause goes to the DEBUG log only (it can quote values)
        log.error("command %s: %s; run %s stays PENDING until the claim lapses", head.id, exc, head.run_id)
        log.debug("failure of command %s", head.id, exc_info=True)
        return "LAPSED"
    if isinstance(exc, DeterministicFailure | StepLimitExceeded | WorkflowError):
        if isinstance(exc, WorkflowError) and exc.retryable:
            _retry_transient(head, token, f"TRANSIENT: {exc.code}")
            return "TRANSIENT"
        reason = (
            settlement.failure_reason(exc)
            if not isinstance(exc, WorkflowError)
            else (f"DETERMINISTIC_FAILURE: {exc.code}")
        )
        log.error(
            "command %s failed deterministically (%s)",
            head.id,
            reason.split(":")[0],
            exc_info=log.isEnabledFor(logging.DEBUG),
        )
        _fail(
            head,
            token,
            reason,
            step_limit=isinstance(exc, StepLimitExceeded),
            deadline=deadline,
            detail=settlement.failure_detail(exc),
        )
        return "FAILED"
    if isinstance(exc, DatabaseError):
        if db.sqlstate(exc) == db.QUERY_CANCELED:
            return "DEADLINE"
        if db.is_transient(exc):
            close_old_connections()
            _retry_transient(head, token, f"TRANSIENT: database failure (sqlstate {db.sqlstate(exc) or 'unknown'})")
            return "TRANSIENT"
    # exception text can quote values: only its type above DEBUG, and in last_error and the
    # run's failure only framework text (a SQLSTATE is a code, never a class name or text)
    if isinstance(exc, DatabaseError):
        where, what = "in the database ", f"database error (sqlstate {db.sqlstate(exc) or 'unknown'})"
    else:
        where, what = "", "the segment failed"
    log.error("command %s failed %s(%s)", head.id, where, type(exc).__name__)
    log.debug("failure of command %s", head.id, exc_info=True)
    _fail(head, token, f"DETERMINISTIC_FAILURE: {what}", step_limit=False, deadline=deadline)
    return "FAILED"


_last_snapshot = 0.0


def _snapshot() -> None:
    """A QueueSnapshot at most once per second per process, and only while observed."""
    global _last_snapshot
    now = time.monotonic()
    if observers.has_observers() and now - _last_snapshot >= 1.0:
        _last_snapshot = now
        observers.emit(observers.QueueSnapshot(queue_counts()))


RECOVER_EVERY_SECONDS = 2.0
_last_recovery = 0.0


def _recover_due() -> list[Any]:
    """Take expired claims back at most every 2 s per process, from whichever worker drains;
    answers the runs whose commands went back to PENDING (the caller runs them: no wake-up
    names them).

    The sweep does it too, but its message queues behind the wake-ups: under a backlog a
    dead executor's command would wait for the whole backlog, not for its lease."""
    global _last_recovery
    now = time.monotonic()
    if now - _last_recovery >= RECOVER_EVERY_SECONDS:
        _last_recovery = now
        return [r["run_id"] for r in _recover_expired() if r["status"] == CommandStatus.PENDING]
    return []


def drain(
    *, run_id: Any = None, budget_seconds: float = 20.0, batch: int | None = None, min_age_seconds: float = 0.0
) -> int:
    """Run claimable commands until none is left or the budget is spent. Answers the count."""
    if not conf.get().EXECUTOR.ENABLED:
        return 0
    _snapshot()
    limit = batch or conf.get().EXECUTOR.CLAIM_BATCH
    stop = time.monotonic() + budget_seconds
    done = 0
    while time.monotonic() < stop:
        _recover_due()
        heads = peek(limit, run_id, min_age_seconds=min_age_seconds)
        if not heads:
            break
        progressed = False
        for head in heads:
            outcome = process(head)
            if outcome not in ("SKIPPED", "RELEASED"):
                progressed = True
                done += 1
            if time.monotonic() >= stop:
                break
        if not progressed:
            break
    return done


def claim_run_head(run_id: Any) -> tuple[Head, Any] | str:
    """Claim the head of one run in one statement: (head, token); otherwise "IDLE" (a run
    gone, nothing runnable now), "BUSY" (another transaction holds the run's lock) or
    "FULL_PATH" (an ended or failed run, a head whose attempts are spent: the full claim
    settles or dead-letters it)."""
    token = uuid.uuid4()
    # carried marks ride only on a claim that is its own transaction
    marks = [] if connection.in_atomic_block else outbox.take_marks()
    params = _claim_params(run_id, token, marks)
    try:
        row = _claim_statement(CLAIM_RUN_HEAD, params)
    except BaseException as exc:
        outbox.restore_marks(marks)
        if isinstance(exc, DatabaseError) and db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
            return "BUSY"  # another transaction holds the run: the wake-up is sent again (``_drain_run``)
        raise
    claimed = _claimed_head(row)
    return claimed if isinstance(claimed, str) else (claimed, token)


def _claim_params(run_id: Any, token: Any, marks: list[tuple[int, Any]]) -> dict[str, Any]:
    settings = conf.get().EXECUTOR
    return {
        "run": run_id,
        "max": settings.MAX_ATTEMPTS,
        "token": token,
        "by": executor_id(),
        "lease": settings.LEASE_SECONDS,
        "mark_ids": [i for i, _ in marks],
        "mark_tokens": [t for _, t in marks],
    }


def _claimed_head(row: dict[str, Any] | None) -> Head | str:
    """The head a CLAIM_RUN_HEAD row claimed, or "IDLE" / "FULL_PATH" (``claim_run_head``)."""
    if row is None or row["status_now"] is None:
        return "IDLE"  # (the run is gone)
    status_now, heads = row.pop("status_now"), row.pop("heads")
    if row["id"] is not None:
        return Head(**row)
    if status_now in LIVE_STATUSES and not heads:
        return "IDLE"
    return "FULL_PATH"


class NotClaimed(Exception):
    """The claim that travelled with a segment's first statements found nothing to run here:
    ``why`` is "IDLE", "BUSY" or "FULL_PATH" (as ``claim_run_head``), "DEFER" (claimed, but this node
    cannot build the plan) or "FAULT" (the after_claim fault point fired: ``error``)."""

    def __init__(self, why: str, error: BaseException | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.error = error


class _Claiming:
    """A claim sent in the same round trip as the segment's first statements
    (``locks.claim_and_lock``): the claim commits on its own first, as the reference requires,
    and the segment's lock, fence and reads follow it without another wait. A claim that finds
    nothing costs a rollback of the segment's (empty) transaction."""

    def __init__(self, run_id: Any) -> None:
        self.run_id = run_id
        self.token = uuid.uuid4()
        self.marks: list[tuple[int, Any]] = []
        self.head: Head | None = None
        self.plan: Plan | None = None

    def open(self, remaining_ms: int) -> tuple[RunRow | None, CommandRow | None, Plan | None]:
        sql = CLAIM_RUN_HEAD.format(async_commit=ASYNC_COMMIT)
        self.marks = outbox.take_marks()
        params = _claim_params(self.run_id, self.token, self.marks)
        try:
            found = locks.claim_and_lock(sql, params, self.run_id, self.token, remaining_ms)
        except BaseException as exc:
            outbox.restore_marks(self.marks)  # nothing was committed
            if isinstance(exc, DatabaseError) and db.sqlstate(exc) == db.LOCK_NOT_AVAILABLE:
                raise NotClaimed("BUSY") from None
            raise
        claimed = _claimed_head(found.claim)
        if isinstance(claimed, str):
            raise NotClaimed(claimed)
        self.head = claimed
        try:
            faults.point("after_claim")
        except DatabaseError as exc:  # the injected failure (``faults``): as before the segment
            raise NotClaimed("FAULT", exc) from None
        if found.error is not None:
            raise found.error  # the claim stands; the segment's transaction is aborted
        if found.run is None or found.command is None:
            # busy (the transaction is aborted: no look-up may run in it) or fenced: the
            # segment stops before it needs the plan; ``_execute`` looks it up after the rollback
            return found.run, found.command, None
        self.plan = _plan_for(claimed)
        if self.plan is None:
            raise NotClaimed("DEFER")
        return found.run, found.command, self.plan


def _claim_and_execute(run_id: Any, started: float) -> tuple[str, bool] | str:
    """Claim the run's head and run its segment, the claim sent with the segment's first
    statements: (outcome, more), or "IDLE" / "BUSY" / "FULL_PATH" / "DEFERRED"."""
    claiming = _Claiming(run_id)
    try:
        return _execute(None, claiming.token, None, started, claiming)
    except NotClaimed as exc:
        if exc.why == "DEFER" and claiming.head is not None:
            # claimed before the plan was looked at: give the attempt back, then defer
            _release(claiming.head.id, claiming.token)
            defer(claiming.head)
            return "DEFERRED"
        if exc.why == "FAULT" and exc.error is not None:
            raise exc.error from None
        return exc.why


def drain_run(run_id: Any, *, budget_seconds: float = 20.0) -> int:
    """Run one run's commands (the work of a wake-up that names the run). The common case
    costs one claim statement and the segment per command, and no further look-up when the
    segment found nothing else queued under its lock (a command recorded after that sends its
    own wake-up); a run the one-statement claim cannot serve (ended or failed with commands
    left, spent attempts) takes the full path."""
    if not conf.get().EXECUTOR.ENABLED:
        return 0
    stop = time.monotonic() + budget_seconds
    recovered = _recover_due()
    done = _drain_run(run_id, stop)
    for other in recovered:
        if time.monotonic() >= stop:
            break
        done += drain(run_id=other, budget_seconds=max(0.1, stop - time.monotonic()))
    return done


# A wake-up that finds its run's lock held by another transaction is sent again this much
# later, never dropped: the holder may record nothing and send no wake-up of its own (a replay
# of a duplicate key, a refused call, a reassignment), and the command would wait for the
# sweep. A segment that held the lock until its deadline (``RELEASED``) is sent again too.
BUSY_RETRY_SECONDS = 0.1


def _wake_again(run_id: Any) -> None:
    wakeups.wake(run_id, timezone.now() + timedelta(seconds=BUSY_RETRY_SECONDS))


def _drain_run(run_id: Any, stop: float) -> int:
    done = 0
    while time.monotonic() < stop:
        started = time.monotonic()
        if pipeline.COMMITS_IN_PIPELINE and not connection.in_atomic_block:
            result = _claim_and_execute(run_id, started)
            if result == "IDLE":
                return done
            if result == "BUSY":
                _wake_again(run_id)
                return done
            if result == "FULL_PATH":
                return done + drain(run_id=run_id, budget_seconds=max(0.1, stop - time.monotonic()))
            if result == "DEFERRED":
                return done + 1
            if result[0] == "RELEASED":
                _wake_again(run_id)
                return done
            done += 1
            if not result[1]:
                return done
            continue
        claimed = claim_run_head(run_id)
        if claimed == "IDLE":
            return done
        if claimed == "BUSY":
            _wake_again(run_id)
            return done
        if isinstance(claimed, str):
            return done + drain(run_id=run_id, budget_seconds=max(0.1, stop - time.monotonic()))
        head, token = claimed
        plan = _plan_for(head)
        if plan is None:
            # claimed before the plan was looked at: give the attempt back, then defer
            _release(head.id, token)
            defer(head)
            return done + 1
        outcome, more = _execute(head, token, plan, started)
        if outcome == "RELEASED":
            _wake_again(run_id)
            return done
        done += 1
        if not more:
            return done
    return done


def recover_expired_leases() -> int:
    """Expired claims go back to PENDING (attempt stays spent); a marked one is OUTCOME_UNKNOWN."""
    return len(_recover_expired())


def recover_expired_runs() -> list[Any]:
    """``recover_expired_leases``, answering the runs whose commands went back to PENDING
    (no wake-up names them: the caller runs them)."""
    global _last_recovery
    _last_recovery = time.monotonic()  # the drain that follows need not look again
    return [r["run_id"] for r in _recover_expired() if r["status"] == CommandStatus.PENDING]


def _recover_expired() -> list[dict[str, Any]]:
    expired = db.fetchdicts(SQL.recover_expired)
    for r in expired:
        observers.emit(observers.LeaseExpired(str(r["run_id"]), r["id"], r["kind"]))
    return expired


def queue_counts() -> dict[str, int]:
    return {str(s): int(n) for s, n in db.fetchall(SQL.queue_counts)}
