"""Writes: the public Python API of the engine (DESIGN.md §5).

Every operation is keyword-only, records in the caller's transaction when one is open and
otherwise opens its own, and raises the typed errors of ``workflows.exceptions`` (each with
a stable ``code``). Views, admin, the API and Celery tasks call these, never the engine.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from workflows import conf
from workflows.engine import (
    actors,
    bounds,
    commands,
    db,
    locks,
    pipeline,
    probe,
    recording,
    retention,
    teardown,
    totals,
)
from workflows.engine import events as event_engine
from workflows.engine.probe import IdleReport
from workflows.engine.recording import Recorded
from workflows.exceptions import (
    BusinessKeyAmbiguous,
    IdempotencyConflict,
    InstanceNotFound,
    InvalidPayload,
    StateVersionMismatch,
    Violation,
    WebhookNotFound,
)
from workflows.models import (
    ENDED_STATUSES,
    Command,
    CommandKind,
    CommandStatus,
    Dedup,
    DefinitionVersion,
    Run,
    WebhookSubscription,
)

__all__ = [
    "IdleReport",
    "KeyedSignal",
    "Recorded",
    "apply_retention",
    "await_idle",
    "bulk_operation_apply_batch",
    "bulk_operation_create",
    "bulk_operations_stalled",
    "cancel",
    "cancel_confirmed",
    "complete_task",
    "database_error",
    "expire_idempotency_keys",
    "is_transient",
    "migrate",
    "purge_runs",
    "reassign_task",
    "reconcile_command",
    "restore_runs",
    "retry",
    "run_totals_refresh",
    "set_retention_days",
    "signal",
    "signal_by_key",
    "signal_with_start",
    "start",
    "webhook_create",
    "webhook_delete",
    "webhook_problems",
    "webhook_redeliver",
    "webhook_rotate_secret",
    "webhook_update",
]


def _tx(operation: str, fn: Any, **kwargs: Any) -> Any:
    try:
        with transaction.atomic(), pipeline.owned_transaction():
            return fn(**kwargs)
    except DatabaseError as exc:
        raise db.map_database_error(exc, operation) from None


# A write's condition on the run: one state version, any of several, or none; an item may also
# be a run's tag, (state version, next command sequence), which the write itself advances.
ExpectedVersion = int | Collection[int | tuple[int, int]] | None


def _conditional(
    *, record: Any, expected_state_version: ExpectedVersion, callers_first: bool = False, **kwargs: Any
) -> Any:
    """``record(**kwargs)`` (a recording on ``kwargs["run_id"]``), only while the run's
    ``state_version`` is ``expected_state_version`` (or one of them), or its tag, (state
    version, next command sequence), is one of them; None: unconditional.

    The compare holds the run's execution lock, taken here before the recording takes it again
    in the same transaction, so nothing can change the state between the compare and the write
    (the executor changes a run only under that lock). ``callers_first``: the recording locks
    the run's call chain before the run (cancel), and so does this, keeping the lock order.
    A repeat of a committed request under its idempotency key still answers the first
    recording before any other check: on a mismatch the recording runs in a savepoint and is
    kept only when it is such a replay. Refuses STATE_VERSION_MISMATCH, recording nothing.
    """
    if expected_state_version is None:
        return record(**kwargs)
    if callers_first:
        teardown.lock_callers(kwargs["run_id"])
    run = locks.lock_run(kwargs["run_id"])
    expected = {expected_state_version} if isinstance(expected_state_version, int) else set(expected_state_version)
    version = int(run["state_version"])
    # a tag holds the next command sequence too: the recording below takes a sequence number
    # in this transaction, under this lock, so a second writer holding the same tag finds it
    # advanced (compare-and-set: one winner, the rest STATE_VERSION_MISMATCH)
    if version in expected or (version, int(run["next_seq"])) in expected:
        return record(**kwargs)
    mismatch = StateVersionMismatch("the run's state version is not the one the request was conditioned on")
    if kwargs.get("idempotency_key"):
        with transaction.atomic():
            recorded = record(**kwargs)
            if recorded.replay:
                return recorded
            raise mismatch  # leaves the savepoint: the new recording is rolled back
    raise mismatch


def database_error(exc: DatabaseError, operation: str) -> Exception:
    """The workflow error a database failure maps to: LOCK_TIMEOUT, or PERSISTENCE that is
    retryable (503) only for a transient failure (connection loss, lock timeout, deadlock,
    serialization) and a technical 500 otherwise; value-free text naming the SQLSTATE."""
    return db.map_database_error(exc, operation)


def is_transient(exc: BaseException) -> bool:
    """Whether a retry of the whole transaction can get past ``exc`` (see ``database_error``)."""
    return db.is_transient(exc)


def start(
    *,
    definition_id: str,
    payload: Any = None,
    version: int | None = None,
    scope: str | None = None,
    business_key: str = "",
    idempotency_key: str | None = None,
    actor: Any = None,
    context: dict[str, Any] | None = None,
) -> Recorded:
    """Record a START: a PENDING run and its START command (the executor runs it).

    Refuses: NO_CURRENT_VERSION, VERSION_NOT_RUNNABLE, DEPRECATED, INVALID_TRANSITION
    (retired), INVALID_PAYLOAD (bounds, start schema, key lengths), IDEMPOTENCY_CONFLICT.
    A replay with the same key and payload answers the first recording.
    """
    return _tx(
        "start",
        recording.start,
        definition_id=definition_id,
        payload=payload,
        version=version,
        scope=scope,
        business_key=business_key,
        idempotency_key=idempotency_key,
        actor=actors.coerce(actor),
        context=context,
    )


def signal(
    *,
    run_id: Any,
    name: str,
    payload: Any = None,
    branch: str | None = None,
    idempotency_key: str | None = None,
    actor: Any = None,
    context: dict[str, Any] | None = None,
    expected_state_version: ExpectedVersion = None,
) -> Recorded:
    """Record a SIGNAL behind the run's earlier commands; the executor applies or parks it.

    Refuses: INSTANCE_NOT_FOUND, SIGNAL_REJECTED (ended run, undeclared name),
    INVALID_PAYLOAD (bounds), SIGNAL_LIMIT, IDEMPOTENCY_CONFLICT, LOCK_TIMEOUT (retryable),
    STATE_VERSION_MISMATCH (see ``expected_state_version`` in :func:`_conditional`).
    """
    return _tx(
        "signal",
        _conditional,
        record=recording.signal,
        expected_state_version=expected_state_version,
        run_id=run_id,
        name=name,
        payload=payload,
        branch=branch,
        idempotency_key=idempotency_key,
        actor=actors.coerce(actor),
        context=context,
    )


def complete_task(
    *,
    task_id: Any,
    decision: str,
    payload: Any = None,
    expected_assignment: dict[str, Any] | None = None,
    subject_version: str | None = None,
    idempotency_key: str | None = None,
    actor: Any = None,
) -> Recorded:
    """Record a COMPLETION and reserve the task (OPEN → COMPLETING).

    Refuses: TASK_NOT_FOUND, INVALID_PAYLOAD (bounds, decision schema with pointers, unknown
    decision), TASK_NOT_WAITING (not OPEN, reassigned, stale subject version),
    IDEMPOTENCY_CONFLICT, LOCK_TIMEOUT.
    """
    return _tx(
        "complete_task",
        recording.complete_task,
        task_id=task_id,
        decision=decision,
        payload=payload,
        expected_assignment=expected_assignment,
        subject_version=subject_version,
        idempotency_key=idempotency_key,
        actor=actors.coerce(actor),
    )


def reassign_task(*, task_id: Any, mode: str, value: str, actor: Any = None) -> None:
    """Reassign an OPEN task inline (logged as TASK_REASSIGNED with the reassigner).

    Only to someone who may hold it: an existing active user (by the user model's
    ``USERNAME_FIELD``) or an existing group; otherwise nobody could ever act on the task (an
    approver could hide a group task by reassigning it to a made-up name).
    Refuses: ASSIGNEE_NOT_FOUND (422, nothing changed), TASK_NOT_FOUND, TASK_NOT_WAITING,
    INVALID_PAYLOAD, LOCK_TIMEOUT.
    """
    from workflows import access
    from workflows.exceptions import AssigneeNotFound, Violation

    if isinstance(value, str) and value and len(value) <= 255:
        problem = access.assignee_problem(mode=mode, value=value)
        if problem is not None:
            raise AssigneeNotFound(
                "the task can be assigned only to an existing active user or an existing group",
                violations=[Violation(pointer="/value", type="assignee", message=problem)],
            )
    return _tx(
        "reassign_task", _reassign_releasing_claim, task_id=task_id, mode=mode, value=value, actor=actors.coerce(actor)
    )


def cancel(*, run_id: Any, reason: str = "", actor: Any = None, expected_state_version: ExpectedVersion = None) -> None:
    """Cancel a run synchronously: every open command, timer, task, branch and called run.

    Refuses: INSTANCE_NOT_FOUND, SIGNAL_REJECTED (already ended), LOCK_TIMEOUT,
    STATE_VERSION_MISMATCH.
    """
    return _tx(
        "cancel",
        _conditional,
        record=recording.cancel,
        expected_state_version=expected_state_version,
        callers_first=True,
        run_id=run_id,
        reason=reason,
        actor=actors.coerce(actor),
    )


def cancel_confirmed(
    *, run_id: Any, seen_state_version: int, seen_history_seq: int, reason: str = "", actor: Any = None
) -> None:
    """Cancel-run confirmation: cancel like :func:`cancel`, unless the run moved on since the
    operator saw it (``seen_*`` are the run's ``state_version`` and ``history_seq`` shown).

    "Moved on" is: not WAITING any more, another state version, or a step taken (a DECISION
    logged) after ``seen_history_seq``; a reminder or a parked signal does not count. The check
    and the teardown hold the run's lock together, so an approver or a timer cannot slip in.
    Refuses: INSTANCE_NOT_FOUND, ALREADY_MOVED_ON, LOCK_TIMEOUT.
    """
    from workflows.engine import reconcile

    return _tx(
        "cancel",
        reconcile.cancel_confirmed,
        run_id=run_id,
        seen_state_version=int(seen_state_version),
        seen_history_seq=int(seen_history_seq),
        reason=reason,
        actor=actors.coerce(actor),
    )


def reconcile_command(*, command_id: Any, action: str, reason: str, actor: Any) -> Recorded:
    """Reconcile an OUTCOME_UNKNOWN command (its effect may have happened): administrators only.

    ``action="replay"`` sets it back to PENDING with its attempts reset (the effect runs
    again); ``action="resolve"`` sets it back to PENDING with the step of its effect marker
    recorded as done (the segment skips that effect). A non-blank ``reason`` is required;
    who, when and why are kept on the command and the history gets COMMAND_RECONCILED.
    ``actor`` must hold the operate capability (``workflows.access``).
    Refuses: NOT_PERMITTED, INVALID_PAYLOAD (action, reason), COMMAND_NOT_FOUND,
    COMMAND_NOT_RECONCILABLE, LOCK_TIMEOUT.
    """
    from workflows import access
    from workflows.engine import reconcile
    from workflows.exceptions import NotPermitted

    if not access.has(actor, access.Capability.OPERATE):
        raise NotPermitted("reconciling a command is for administrators")
    return _tx(
        "reconcile_command",
        reconcile.reconcile_command,
        command_id=command_id,
        action=action,
        reason=reason,
        actor=actors.coerce(actor),
    )


def retry(*, run_id: Any, actor: Any = None, expected_state_version: ExpectedVersion = None) -> Recorded:
    """Record a RETRY, the single recovery operation (failed run or dead-lettered command).

    Refuses: INSTANCE_NOT_FOUND, SIGNAL_REJECTED (ended, or nothing to recover),
    STATE_VERSION_MISMATCH.
    """
    return _tx(
        "retry",
        _conditional,
        record=recording.retry,
        expected_state_version=expected_state_version,
        run_id=run_id,
        actor=actors.coerce(actor),
    )


def migrate(
    *,
    run_id: Any,
    target_version: int,
    target_scope: str | None = None,
    target_step: str | None = None,
    action: str = "move",
    actor: Any = None,
    expected_state_version: ExpectedVersion = None,
) -> Recorded:
    """Record a MIGRATION to another revision (the executor checks and applies it).

    Refuses: INSTANCE_NOT_FOUND, MIGRATION_ILLEGAL_STATE (ended, scope not admitted, another
    migration pending), INVALID_PAYLOAD, STATE_VERSION_MISMATCH.
    """
    return _tx(
        "migrate",
        _conditional,
        record=recording.migrate,
        expected_state_version=expected_state_version,
        run_id=run_id,
        target_version=target_version,
        target_scope=target_scope,
        target_step=target_step,
        action=action,
        actor=actors.coerce(actor),
    )


def await_idle(timeout: float = 30.0, run_id: Any = None) -> IdleReport:
    """The execution probe: wait until nothing is runnable (for one run or all)."""
    return probe.await_idle(timeout, run_id)


# --- migration of parked runs (the Migrate dialog and the bulk API) --------------------------


def register_migration_handler(*, definition_id: str, from_version: int, to_version: int, fn: Any) -> None:
    """Register ``fn(state) -> state`` mapping a run's state between two revisions whose state
    schemas differ. Without one, a move whose state the target's schema refuses is rejected."""
    from workflows.engine import migration

    migration.register_migration_handler(definition_id, from_version, to_version, fn)


def migration_preview(
    *,
    scope: str,
    definition_id: str,
    source_version: int,
    target_version: int,
    rows: list[Any],
    actor: Any = None,
    reason: str = "",
    replaces: int | None = None,
    notify_digest: bool | None = None,
) -> int | None:
    """Freeze the runs selected per position as a PREVIEWED migration record; answers its id,
    or None when nothing is selected (an untouched dialog changes nothing).

    ``notify_digest``: whether assignees whose approvals a move reopens for them get one digest
    per migration instead of no notice (None: ``WORKFLOWS["MIGRATE"]["DIGEST_NOTICES"]``).

    ``rows``: ``migration.RowRequest`` values or dicts ``{node, kind, action, target_node,
    runs}`` (``runs`` is ``"all"`` or a list of run ids parked there). Runs that are not
    parked at that position of the source revision are left out. Writes only the record.
    ``replaces``: an earlier preview (of the same dialog) discarded in the same transaction.
    Refuses: INVALID_PAYLOAD (unknown revision, action or target node; value-free),
    RUNS_IN_OPEN_MIGRATION (a selected run is frozen in a migration that is not over).
    """
    from workflows.engine import migration

    requests = [r if isinstance(r, migration.RowRequest) else migration.RowRequest(**r) for r in rows]
    return _tx(
        "migration_preview",
        migration.freeze,
        scope=scope,
        definition_id=definition_id,
        source_version=int(source_version),
        target_version=int(target_version),
        rows=requests,
        actor=actors.coerce(actor),
        reason=reason,
        replaces=replaces,
        notify_digest=notify_digest,
    )


def migration_apply(*, record_id: int, actor: Any = None, confirm: int | None = None) -> Any:
    """Apply the next bounded batch (``MIGRATE.APPLY_BATCH``) of a previewed migration: one
    MIGRATION command per run, each re-checked under the run's execution lock (a run that moved
    on is marked so, never forced). Answers the record's ``Progress``; call again to continue.

    Refuses: MIGRATION_ILLEGAL_STATE (unknown or discarded record), INVALID_PAYLOAD (more than
    100 runs applied without ``confirm`` equal to their number).
    """
    from workflows.engine import migration

    return _tx(
        "migration_apply", migration.apply_batch, record_id=int(record_id), actor=actors.coerce(actor), confirm=confirm
    )


def migration_apply_background(*, record_id: int, actor: Any = None, confirm: int | None = None) -> Any:
    """Apply a previewed migration in the background: the record is marked APPLYING and, after
    commit, a task applies it in bounded batches (each its own transaction) until nothing is
    left; a worker killed mid-apply is replaced by the sweep once the record's lease lapses.
    Answers the record's ``Progress`` at once. Calling it again for an applying record only
    sends another task (harmless: one task at a time holds the record).

    Refuses: MIGRATION_ILLEGAL_STATE (unknown, discarded, paused, closed or finished record),
    INVALID_PAYLOAD (more than 100 runs without ``confirm`` equal to their number).
    """
    from workflows.engine import migration

    return _tx(
        "migration_apply_background",
        migration.background.start,
        record_id=int(record_id),
        actor=actors.coerce(actor),
        confirm=confirm,
    )


def migration_pause(*, record_id: int, actor: Any = None) -> Any:
    """Pause a migration being applied: the batch under way (if any) finishes, no other starts.
    Refuses MIGRATION_ILLEGAL_STATE (unknown record, or not applying)."""
    from workflows.engine import migration

    return _tx("migration_pause", migration.background.pause, record_id=int(record_id), actor=actors.coerce(actor))


def migration_resume(*, record_id: int, actor: Any = None) -> Any:
    """Resume a paused migration in the background. Refuses MIGRATION_ILLEGAL_STATE (unknown
    record, or not paused)."""
    from workflows.engine import migration

    return _tx("migration_resume", migration.background.resume, record_id=int(record_id), actor=actors.coerce(actor))


def migration_close(*, record_id: int, reason: str, actor: Any = None) -> Any:
    """Close an applying or paused migration as partially applied, with a required reason (kept
    on the record with who closed it). The runs not applied yet end NOT_APPLIED and stay where
    they are; runs already handed to the executor get their command's outcome.
    Refuses INVALID_PAYLOAD (blank reason), MIGRATION_ILLEGAL_STATE (unknown record, or neither
    applying nor paused)."""
    from workflows.engine import migration

    return _tx(
        "migration_close",
        migration.background.close,
        record_id=int(record_id),
        actor=actors.coerce(actor),
        reason=reason,
    )


def migration_run_background(*, record_id: int, budget_seconds: float) -> str:
    """The background task's body: apply batches of a record while holding its lease (each
    batch its own transaction). Answers ``held``, ``done``, ``stopped``, ``waiting`` or
    ``more`` (the budget ran out: send the next task)."""
    from workflows.engine import migration

    return migration.background.run(record_id=int(record_id), budget_seconds=budget_seconds)


def migration_due_background(*, limit: int = 100) -> list[int]:
    """Migrations applying in the background that no live task holds (the sweep's backstop)."""
    from workflows.engine import migration

    return migration.background.due(limit=limit)


def migration_progress(*, record_id: int) -> Any:
    """Where a migration stands (``Progress``). Settles the outcome of runs whose command was
    settled without the migration handler (the run ended or was cancelled meanwhile) and marks
    the record DONE when nothing is left. Refuses MIGRATION_ILLEGAL_STATE (unknown record)."""
    from workflows.engine import migration

    return _tx("migration_progress", migration.progress, record_id=int(record_id))


def migration_discard(*, record_id: int) -> bool:
    """Abandon a preview that was never applied. Answers whether it was discarded."""
    from workflows.engine import migration

    return bool(_tx("migration_discard", migration.discard, record_id=int(record_id)))


# --- claims on group tasks (the inbox) ----------------------------------------------------------
#
# A group task reaches every member; a claim says who is working on it so two approvers do not
# decide the same one. Claiming is one conditional UPDATE (never a read, then a write): of two
# members claiming at once exactly one row update wins. A user-assigned task needs no claim.


def claim_task(*, task_id: Any, actor: Any) -> None:
    """Claim an OPEN group task for ``actor`` (a Django user). Claiming it again is a no-op.

    Refuses: TASK_NOT_FOUND, TASK_NOT_WAITING (not OPEN), TASK_CLAIMED (another member holds
    it), TASK_NOT_CLAIMABLE (assigned to a user).
    """
    from django.db.models.functions import Now

    from workflows.models import Task, TaskStatus

    name = _claimer(actor)
    won = Task.objects.filter(pk=task_id, status=TaskStatus.OPEN, assignment_mode="group", claimed_by="").update(
        claimed_by=name, claimed_at=Now(), updated_at=Now()
    )
    if not won:
        _refuse_claim_change(task_id, name, held=True)


def unclaim_task(*, task_id: Any, actor: Any) -> None:
    """Release ``actor``'s claim on an OPEN task: every group member may take it again.

    Refuses: TASK_NOT_FOUND, TASK_NOT_WAITING (not OPEN), TASK_CLAIMED (not held by ``actor``).
    """
    from django.db.models.functions import Now

    from workflows.models import Task, TaskStatus

    name = _claimer(actor)
    released = Task.objects.filter(pk=task_id, status=TaskStatus.OPEN, claimed_by=name).update(
        claimed_by="", claimed_at=None, updated_at=Now()
    )
    if not released:
        _refuse_claim_change(task_id, name, held=False)


def complete_claimed_task(*, task_id: Any, actor: Any, **completion: Any) -> Recorded:
    """:func:`complete_task` that respects claims: refused (TASK_CLAIMED, nothing recorded)
    when someone other than ``actor`` holds the task's claim.

    The claim is read after the completion reserved the task (its row is locked until the
    commit), in the same transaction: a claim committed before is seen and rolls the
    completion back; a claim attempted after finds the task no longer OPEN.
    """
    from workflows.exceptions import TaskNotWaiting
    from workflows.models import Task

    with transaction.atomic():
        recorded = complete_task(task_id=task_id, actor=actor, **completion)
        holder = Task.objects.filter(pk=task_id).values_list("claimed_by", flat=True).first()
        if holder and holder != _claimer(actor):
            raise TaskNotWaiting("the task is claimed by another member of its group", code="TASK_CLAIMED")
    return recorded


def _reassign_releasing_claim(*, task_id: Any, **reassignment: Any) -> None:
    """A reassigned task starts unclaimed: the claim was made among the former assignees."""
    from workflows.models import Task

    recording.reassign_task(task_id=task_id, **reassignment)
    Task.objects.filter(pk=task_id).exclude(claimed_by="").update(claimed_by="", claimed_at=None)


def _claimer(actor: Any) -> str:
    from workflows.exceptions import NotPermitted

    if not getattr(actor, "is_authenticated", False):
        raise NotPermitted("only a signed-in user can claim a task")
    return str(actor.get_username())


def _refuse_claim_change(task_id: Any, name: str, *, held: bool) -> None:
    """Why a claim or release changed no row (``held``: a claim, answered as done when the
    task is already the claimer's)."""
    from workflows.exceptions import TaskNotFound, TaskNotWaiting
    from workflows.models import Task, TaskStatus

    task = Task.objects.filter(pk=task_id).values("status", "assignment_mode", "claimed_by").first()
    if task is None:
        raise TaskNotFound("task not found")
    if task["status"] != TaskStatus.OPEN:
        raise TaskNotWaiting("the task is not waiting for a decision")
    if task["claimed_by"] == (name if held else ""):
        return  # already as asked
    if held and task["assignment_mode"] != "group":
        raise TaskNotWaiting("only a group task can be claimed", code="TASK_NOT_CLAIMABLE")
    raise TaskNotWaiting("the task is claimed by another member of its group", code="TASK_CLAIMED")


# --- signals addressed by business key (issue #31) ------------------------------------------------


@dataclass(frozen=True)
class KeyedSignal:
    """What a signal by business key answers: the run, whether this call started it (with its
    START), and the SIGNAL recorded; ``replay`` when it repeats an earlier call's answer."""

    run_id: str
    started: bool
    start: Recorded | None
    signal: Recorded
    replay: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "started": self.started,
            "start": self.start.as_dict() if self.start else None,
            "signal": self.signal.as_dict(),
        }


# The dedup kinds of the two keyed calls (an idempotency key of one is not a key of the other).
SIGNAL_BY_KEY = "SIGNAL_BY_KEY"
SIGNAL_WITH_START = "SIGNAL_START"


def signal_by_key(
    *,
    definition_id: str,
    business_key: str,
    name: str,
    payload: Any = None,
    scope: str | None = None,
    branch: str | None = None,
    idempotency_key: str | None = None,
    actor: Any = None,
    context: dict[str, Any] | None = None,
) -> KeyedSignal:
    """Signal the one open (not ended) run of ``definition_id`` started in ``scope`` (the start
    scope, default "default") with ``business_key``.

    Refuses: INSTANCE_NOT_FOUND (no open run has the key), BUSINESS_KEY_AMBIGUOUS (more than
    one has it), INVALID_PAYLOAD, IDEMPOTENCY_CONFLICT, and what :func:`signal` refuses.
    A repeat under the same idempotency key answers the first call, even once that run ended.
    """
    return _whole_tx(
        "signal",
        _signal_keyed,
        kind=SIGNAL_BY_KEY,
        start=None,
        definition_id=definition_id,
        business_key=business_key,
        name=name,
        payload=payload,
        scope=scope,
        branch=branch,
        idempotency_key=idempotency_key,
        actor=actors.coerce(actor),
        context=context,
    )


def signal_with_start(
    *,
    definition_id: str,
    business_key: str,
    name: str,
    payload: Any = None,
    start_payload: Any = None,
    version: int | None = None,
    scope: str | None = None,
    branch: str | None = None,
    idempotency_key: str | None = None,
    actor: Any = None,
    context: dict[str, Any] | None = None,
) -> KeyedSignal:
    """Signal the open run of ``definition_id`` with ``business_key`` in start scope ``scope``;
    when none is open, start one (``start_payload``, ``version``) and signal it, in one
    transaction. The START comes first in the new run's queue, so the executor runs it and
    then applies or parks the signal.

    Calls for the same key are serialised by a transaction-level advisory lock on (start
    scope, definition, business key) taken before the look-up, so two concurrent calls start
    one run (the second signals it). A start through :func:`start` takes no such lock: keys
    are not unique among runs, and this guarantee holds between signal-with-start calls.
    Refuses: BUSINESS_KEY_AMBIGUOUS, INVALID_PAYLOAD, IDEMPOTENCY_CONFLICT, what :func:`start`
    and :func:`signal` refuse. A repeat under the same idempotency key answers the first call
    and starts nothing.
    """
    return _whole_tx(
        "signal_with_start",
        _signal_keyed,
        kind=SIGNAL_WITH_START,
        start={"payload": start_payload, "version": version},
        definition_id=definition_id,
        business_key=business_key,
        name=name,
        payload=payload,
        scope=scope,
        branch=branch,
        idempotency_key=idempotency_key,
        actor=actors.coerce(actor),
        context=context,
    )


def _whole_tx(operation: str, fn: Any, **kwargs: Any) -> Any:
    """:func:`_tx` for an operation made of several recordings: none of them may carry the
    COMMIT (``pipeline.may_commit``), so the transaction is not marked as the operation's own."""
    try:
        with transaction.atomic():
            return fn(**kwargs)
    except DatabaseError as exc:
        raise db.map_database_error(exc, operation) from None


def _advisory_lock(*parts: str) -> None:
    """A transaction-level advisory lock on ``parts`` (a hash collision only serialises more)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ["\x1f".join(parts)])


def _signal_keyed(
    *,
    kind: str,
    start: dict[str, Any] | None,
    definition_id: str,
    business_key: str,
    name: str,
    payload: Any,
    scope: str | None,
    branch: str | None,
    idempotency_key: str | None,
    actor: actors.Actor,
    context: dict[str, Any] | None,
) -> KeyedSignal:
    bounds.check_key(business_key, "the business key", pointer="/business_key")
    bounds.check_key(idempotency_key, "idempotency key")
    bounds.check_payload(payload)
    start_scope = scope or "default"
    fp = commands.fingerprint(
        {
            "definition_id": definition_id,
            "business_key": business_key,
            "name": name,
            "payload": payload,
            "branch": branch or "",
            "start": start,
        }
    )
    # the caller's own keys, as for every recording (another caller's same key is another key)
    dedup_scope = f"{start_scope}\x1f{definition_id}\x1f{recording._caller(actor)}"
    if idempotency_key:
        # the key's lock first, then the business key's: one order for every call
        _advisory_lock(kind, dedup_scope, idempotency_key)
        found = Dedup.objects.filter(kind=kind, scope=dedup_scope, key=idempotency_key).first()
        if found is not None:
            return _replay_keyed(found, fp)
    _advisory_lock("business-key", start_scope, definition_id, business_key)
    open_runs = list(
        Run.objects.filter(start_scope=start_scope, definition_id=definition_id, business_key=business_key)
        .exclude(status__in=ENDED_STATUSES)
        .values_list("id", flat=True)[:2]
    )
    if len(open_runs) > 1:
        raise BusinessKeyAmbiguous("more than one open run of the definition has this business key")
    started: Recorded | None = None
    run_id = ""
    # lock, re-read, check: the run read as open may have ended since (its last segment
    # committed in between); then a new run is started, as if none had been open, instead of
    # a signal refused for an ended run (409 in 3-4 of 20 concurrent calls, issue #40). The
    # business key's lock is held, so no other call starts one meanwhile.
    if open_runs and locks.lock_run(open_runs[0])["status"] not in ENDED_STATUSES:
        run_id = str(open_runs[0])
    if not run_id and start is None:
        raise InstanceNotFound("no open run of the definition has this business key")
    if not run_id:
        assert start is not None
        started = recording.start(
            definition_id=definition_id,
            payload=start["payload"],
            version=start["version"],
            scope=scope,
            business_key=business_key,
            actor=actor,
            context=context,
        )
        run_id = started.run_id
    signalled = recording.signal(run_id=run_id, name=name, payload=payload, branch=branch, actor=actor, context=context)
    if idempotency_key:
        Dedup.objects.create(
            kind=kind,
            scope=dedup_scope,
            key=idempotency_key,
            fingerprint=fp,
            run_id=run_id,
            command_id=signalled.command_id,
            result={"start": started.command_id if started else None},
        )
    return KeyedSignal(run_id, started is not None, started, signalled)


def _replay_keyed(found: Dedup, fp: str) -> KeyedSignal:
    if found.fingerprint != fp:
        raise IdempotencyConflict("the idempotency key was used for another request")
    start_id = (found.result or {}).get("start")
    ids = [i for i in (start_id, found.command_id) if i is not None]
    rows = {c.id: c for c in Command.objects.filter(pk__in=ids)}

    def replayed(command_id: int, kind: str) -> Recorded:
        row = rows.get(command_id)
        if row is None:  # the command is gone (retention): it was settled long ago
            return Recorded(str(found.run_id), command_id, kind, CommandStatus.COMPLETE, None, replay=True)
        return Recorded(str(row.run_id), row.id, row.kind, row.status, row.seq, replay=True)

    assert found.command_id is not None
    started = replayed(start_id, CommandKind.START) if start_id is not None else None
    return KeyedSignal(
        str(found.run_id), started is not None, started, replayed(found.command_id, CommandKind.SIGNAL), True
    )


# --- bulk operations (issue #31) ------------------------------------------------------------------
#
# One action (cancel, retry, signal) over a frozen selection of runs, applied in the background
# in bounded batches by ``workflows.engine.bulk_ops`` through the operations above, so each run's
# history and refusals are those of the single-run call.

BULK_OPERATION = "BULK_OPERATION"  # the dedup kind of the creation's idempotency keys

# the capability each bulk action needs (the same as the single-run endpoint's)
BULK_CAPABILITIES = {"cancel": "CANCEL", "retry": "RETRY", "signal": "SIGNAL"}


def bulk_operation_create(
    *,
    action: str,
    run_ids: Iterable[Any],
    filter: dict[str, Any] | None = None,
    signal_name: str = "",
    signal_payload: Any = None,
    reason: str = "",
    idempotency_key: str | None = None,
    actor: Any = None,
) -> int:
    """Freeze a bulk operation: the record and one item per run, in one transaction; a Celery
    task applies it after commit (the sweep resumes it if that message is lost). Answers the
    record's id.

    ``run_ids``: the ids asked for (``filter`` None: every one must name a run; repeats are
    kept once), or the runs a filter matched (``filter``: the filter as given, kept on the
    record; ``run_ids`` may be a lazy query, read inside the transaction). At most
    ``BULK.MAX_RUNS`` runs. With ``idempotency_key`` a repeat with the same body answers the
    first record and freezes nothing.
    Refuses: INVALID_PAYLOAD (unknown action, signal without a name, payload bounds, an id
    that names no run, a selection larger than ``BULK.MAX_RUNS``; pointers, no values),
    IDEMPOTENCY_CONFLICT.
    """
    return int(
        _whole_tx(
            "bulk_operation_create",
            _bulk_create,
            action=action,
            run_ids=run_ids,
            filter=filter,
            signal_name=signal_name,
            signal_payload=signal_payload,
            reason=reason,
            idempotency_key=idempotency_key,
            actor=actors.coerce(actor),
        )
    )


def _bulk_create(
    *,
    action: str,
    run_ids: Iterable[Any],
    filter: dict[str, Any] | None,
    signal_name: str,
    signal_payload: Any,
    reason: str,
    idempotency_key: str | None,
    actor: actors.Actor,
) -> int:
    import itertools

    from workflows import conf
    from workflows.engine import bulk_ops, reconcile
    from workflows.exceptions import InvalidPayload, Violation
    from workflows.models import BulkAction

    if action not in BulkAction.values:
        raise InvalidPayload(
            "unknown bulk action",
            violations=[Violation(pointer="/action", type="enum", message="cancel, retry or signal")],
        )
    if action == BulkAction.SIGNAL:
        if not isinstance(signal_name, str) or not signal_name.strip() or len(signal_name) > 255:
            message = "a signal name of 1 to 255 characters is required"
            raise InvalidPayload(
                "the signal needs a name",
                violations=[Violation(pointer="/signal/name", type="required", message=message)],
            )
        bounds.check_payload(signal_payload)
    else:
        signal_name, signal_payload = "", None
    bounds.check_key(idempotency_key, "idempotency key")
    reason = reconcile.clean_reason(reason)  # folded, control characters dropped, at most 1000
    selection = "run_ids" if filter is None else "filter"
    fp = None
    if idempotency_key:
        if filter is None:
            run_ids = list(run_ids)
        fp = commands.fingerprint(
            {
                "action": action,
                "selection": filter if filter is not None else [str(r) for r in run_ids],
                "signal": [signal_name, signal_payload],
                "reason": reason,
            }
        )
        scope = recording._caller(actor)
        _advisory_lock(BULK_OPERATION, scope, idempotency_key)
        found = Dedup.objects.filter(kind=BULK_OPERATION, scope=scope, key=idempotency_key).first()
        if found is not None:
            if found.fingerprint != fp:
                raise IdempotencyConflict("the idempotency key was used for another request")
            return int((found.result or {})["bulk_operation"])
    limit = conf.get().BULK.MAX_RUNS
    pointer = "/run_ids" if filter is None else "/filter"
    chosen = list(itertools.islice(iter(run_ids), limit + 1))
    if len(chosen) > limit:
        message = f"selects more than {limit} runs; narrow the selection"
        raise InvalidPayload(
            "the selection is too large", violations=[Violation(pointer=pointer, type="max_items", message=message)]
        )
    ids = list(dict.fromkeys(_uuid_text(r) for r in chosen))
    if filter is None:
        found_ids = {str(r) for r in Run.objects.filter(pk__in=[i for i in ids if i]).values_list("id", flat=True)}
        missing = [i for i, r in enumerate(chosen) if _uuid_text(r) not in found_ids]
        if missing:
            raise InvalidPayload(
                "the selection names runs that do not exist",
                violations=[
                    Violation(pointer=f"/run_ids/{i}", type="not_found", message="no such run") for i in missing
                ],
            )
    record_id = bulk_ops.freeze(
        action=action,
        run_ids=ids,
        selection=selection,
        filter=filter,
        signal_name=signal_name,
        signal_payload=signal_payload,
        reason=reason,
        actor=actor,
    )
    if idempotency_key and fp is not None:
        Dedup.objects.create(
            kind=BULK_OPERATION,
            scope=recording._caller(actor),
            key=idempotency_key,
            fingerprint=fp,
            result={"bulk_operation": record_id},
        )
    return record_id


def _uuid_text(value: Any) -> str:
    """A run id in its canonical text ("" for anything that is no UUID: it names no run)."""
    import uuid

    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        return ""


def bulk_operation_apply_batch(*, operation_id: int) -> Any:
    """Apply the next batch (``BULK.BATCH`` runs) of a bulk operation in one transaction: each
    run through :func:`cancel`, :func:`retry` or :func:`signal` as the operation's creator, in
    a savepoint; each item's outcome written with it. Answers ``bulk_ops.Batch`` (items
    claimed, whether the operation is DONE). A creator who no longer holds the action's
    capability gets NOT_PERMITTED on every run left. Safe to call twice at once (SKIP LOCKED).
    """
    from workflows import conf
    from workflows.engine import bulk_ops

    settings = conf.get()
    return _whole_tx(
        "bulk_operation_apply",
        bulk_ops.apply_batch,
        operation_id=int(operation_id),
        apply=_bulk_action(),
        size=settings.BULK.BATCH,
        max_attempts=settings.EXECUTOR.MAX_ATTEMPTS,
    )


def _bulk_action() -> Any:
    """The per-run step of a batch: the operation's action through the operations above, as
    its creator, once the creator's capability is confirmed (asked once per batch)."""
    from workflows.engine import bulk_ops
    from workflows.exceptions import NotPermitted

    permitted: dict[int, bool] = {}

    def apply(operation: dict[str, Any], run_id: Any) -> int | None:
        actor = bulk_ops.actor_of(operation)
        if operation["id"] not in permitted:
            permitted[operation["id"]] = _creator_may(operation, actor)
        if not permitted[operation["id"]]:
            raise NotPermitted("the operation's creator no longer holds the capability of its action")
        if operation["action"] == "cancel":
            cancel(run_id=run_id, reason=operation["reason"], actor=actor)
            return None
        if operation["action"] == "retry":
            return retry(run_id=run_id, actor=actor).command_id
        return signal(
            run_id=run_id, name=operation["signal_name"], payload=operation["signal_payload"], actor=actor
        ).command_id

    return apply


def _creator_may(operation: dict[str, Any], actor: actors.Actor) -> bool:
    """Whether the user who created the operation still may apply it: an active user holding
    the action's capability (``workflows.access``). A call without a user (the Python API, a
    service) was trusted at creation, as the single-run operations trust it."""
    from workflows import access, users
    from workflows.models import ActorKind

    if actor.kind != ActorKind.USER:
        return True
    user = users.named(users.active_users(), actor.id).first()
    capability = access.Capability[BULK_CAPABILITIES[operation["action"]]]
    return user is not None and access.has(user, capability)


def bulk_operations_stalled() -> list[int]:
    """Open bulk operations without a committed batch for ``BULK.STALLED_SECONDS`` (a lost
    message or a killed worker) and no resuming message queued: the sweep sends them to a
    worker again. Each answered is leased to that message for as long again (the caller sends
    it after commit), so it is answered once per lease, not at every sweep."""
    from workflows import conf
    from workflows.engine import bulk_ops

    return bulk_ops.stalled(idle_seconds=conf.get().BULK.STALLED_SECONDS)


# --- the data lifecycle (docs/operations.md, "Retention") --------------------------------


def purge_runs(
    *,
    ended_before: Any = None,
    definition_id: str | None = None,
    include_failed: bool = False,
    archive_dir: str | None = None,
    dry_run: bool = False,
    batch_size: int | None = None,
    max_batches: int | None = None,
) -> retention.PurgeReport:
    """Purge ended runs (and, with ``include_failed``, FAILED ones) that ended before
    ``ended_before``, with every row that references them, in batches of one transaction
    each; archived first to ``archive_dir`` when given. Without ``ended_before`` the site's
    retention policy and the per-version ``retention_days`` decide."""
    if ended_before is None:
        base = retention.policy()
        selection = retention.Selection(
            policy=True,
            definition_id=definition_id,
            include_failed=base.include_failed,
            ended_days=base.ended_days,
            failed_days=base.failed_days,
        )
    else:
        selection = retention.Selection(
            ended_before=ended_before, definition_id=definition_id, include_failed=include_failed
        )
    return retention.purge(
        selection, archive_dir=archive_dir, batch_size=batch_size, max_batches=max_batches, dry_run=dry_run
    )


def expire_idempotency_keys(*, days: int | None = None, max_batches: int | None = None) -> int:
    """Delete idempotency keys older than ``RETENTION.IDEMPOTENCY_KEYS_DAYS``."""
    return retention.expire_idempotency_keys(days=days, max_batches=max_batches)


def apply_retention() -> dict[str, int]:
    """One round of the beat's retention: at most ``MAX_BATCHES_PER_TASK`` batches of the
    policy's runs (archived to ``ARCHIVE_DIR`` when set) and of expired idempotency keys. The
    keys expire whatever the purge does: a purge that fails is raised after them."""
    settings = conf.get().RETENTION
    limit = int(settings.MAX_BATCHES_PER_TASK)
    try:
        report = purge_runs(archive_dir=settings.ARCHIVE_DIR or None, max_batches=limit)
    finally:
        keys = expire_idempotency_keys(max_batches=limit)
    return {"runs": report.runs, "keys": keys, "more": int(report.more)}


def set_retention_days(*, scope: str, definition_id: str, version: int, days: int | None) -> bool:
    """Set (or clear, ``None``) how many days ended runs of one definition version are kept;
    it overrides ``RETENTION.ENDED_RUNS_DAYS``/``FAILED_RUNS_DAYS`` for them. Writes only that
    column; answers whether the version exists. Refuses a value below 1 (INVALID_PAYLOAD)."""
    if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 1):
        raise InvalidPayload("retention days must be a whole number of at least 1, or empty")
    updated = DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id, version=version).update(
        retention_days=days
    )
    return updated == 1


def restore_runs(*, paths: Collection[str]) -> retention.RestoreReport:
    """Load archived runs back (``manage.py restore_runs``); runs stored already are skipped."""
    return retention.restore(paths)


# --- the dashboard's totals of ended runs (engine/totals.py) -----------------------------


def run_totals_refresh(*, only_if_missing: bool = False) -> datetime:
    """Count the ended runs per revision and status into the dashboard's snapshot
    (``workflow_run_totals``), replacing the previous one in one transaction of its own (a
    savepoint inside the caller's); answers the time they were counted at. The beat task
    ``workflows.run_totals`` calls it every minute; the dashboard calls it with
    ``only_if_missing`` when no snapshot is stored yet, which keeps one stored meanwhile.
    Refuses nothing."""
    return totals.refresh(only_if_missing=only_if_missing)


# --- webhook subscriptions (events out) -------------------------------------------------------

WEBHOOK_FIELDS = ("url", "events", "definition_id", "active", "description")
PREVIOUS_SECRET_HOURS = 24  # after a rotation the replaced secret signs too, this long


def _subscription(webhook_id: Any, *, lock: bool = False) -> WebhookSubscription:
    try:
        key = int(webhook_id)
        rows = WebhookSubscription.objects.select_for_update() if lock else WebhookSubscription.objects
        return rows.get(pk=key)
    except (TypeError, ValueError, OverflowError, WebhookSubscription.DoesNotExist):
        raise WebhookNotFound("no webhook subscription has this id") from None


def webhook_create(
    *,
    url: str,
    events: list[str],
    definition_id: str = "",
    active: bool = True,
    description: str = "",
    owner: Any = None,
) -> tuple[WebhookSubscription, str]:
    """Subscribe an https ``url`` to ``events`` (``workflows.signals.EVENT_TYPES``), for every
    definition or only ``definition_id``, on behalf of ``owner`` (a user: its events are
    delivered only while that user may view runs). Answers the subscription and its signing
    secret (``whsec_...``), which is shown this once. Refuses INVALID_PAYLOAD (not https,
    credentials in the URL, a literal non-public address outside the allowed networks, no or
    unknown event types). In the caller's transaction, or its own."""
    event_engine.check_subscription(url=url, events=events)
    secret = event_engine.new_secret()
    subscription = WebhookSubscription.objects.create(
        url=url,
        events=list(dict.fromkeys(events)),
        definition_id=definition_id,
        active=active,
        description=description,
        owner=str(owner.get_username())[:255] if owner is not None else "",
        secret=secret,
    )
    return subscription, secret


def webhook_update(*, webhook_id: Any, **changes: Any) -> WebhookSubscription:
    """Change a subscription's ``url``, ``events``, ``definition_id``, ``active`` or
    ``description``; events recorded before the change keep their deliveries. Refuses
    WEBHOOK_NOT_FOUND, INVALID_PAYLOAD (as ``webhook_create``; an unknown field)."""
    unknown = sorted(set(changes) - set(WEBHOOK_FIELDS))
    if unknown:
        raise InvalidPayload(
            "unknown fields", violations=[Violation(pointer="", type="additionalProperties", message="unknown field")]
        )
    event_engine.check_subscription(url=changes.get("url"), events=changes.get("events"))
    with transaction.atomic():
        subscription = _subscription(webhook_id, lock=True)
        for name, value in changes.items():
            setattr(subscription, name, list(dict.fromkeys(value)) if name == "events" else value)
        subscription.save()
    return subscription


def webhook_delete(*, webhook_id: Any) -> None:
    """Delete a subscription; its deliveries not yet made die (``the webhook subscription was
    deleted``). Refuses WEBHOOK_NOT_FOUND."""
    _subscription(webhook_id).delete()


def webhook_rotate_secret(*, webhook_id: Any) -> tuple[WebhookSubscription, str]:
    """A new signing secret (shown this once); the replaced one still signs, as a second
    signature, for PREVIOUS_SECRET_HOURS (database clock), so receivers can switch over.
    Refuses WEBHOOK_NOT_FOUND."""
    secret = event_engine.new_secret()
    with transaction.atomic():
        subscription = _subscription(webhook_id, lock=True)
        subscription.previous_secret = subscription.secret
        subscription.previous_secret_until = ExpressionWrapper(  # type: ignore[assignment]
            Now() + timedelta(hours=PREVIOUS_SECRET_HOURS), output_field=DateTimeField()
        )
        subscription.secret = secret
        subscription.save()
        subscription.refresh_from_db()
    return subscription, secret


def webhook_redeliver(*, delivery_id: Any) -> None:
    """Deliver an event to its subscription again: a new attempt with the same payload and
    ``webhook-id`` (and a fresh budget of retries), after commit. Refuses WEBHOOK_NOT_FOUND,
    DELIVERY_IN_FLIGHT (an attempt is under way)."""
    try:
        intent_id = int(delivery_id)
    except (TypeError, ValueError):
        raise WebhookNotFound("no webhook delivery has this id") from None
    if not -(2**63) <= intent_id < 2**63:
        raise WebhookNotFound("no webhook delivery has this id")
    _tx("webhook_redeliver", event_engine.redeliver, intent_id=intent_id)


def webhook_problems(*, url: str | None = None, events: Any = None) -> list[Violation]:
    """What ``webhook_create`` would refuse in ``url`` and ``events`` (value-free violations
    with pointers ``/url``, ``/events/N``), for forms that show them beside their fields."""
    return event_engine.subscription_problems(url=url, events=events)
