"""Recording: commands written in the caller's transaction, in the reference's check order.

Every function here runs inside a transaction (``operations`` opens one when the caller has
none). Lock-free checks come first (duplicate, existence, declared name, payload bounds);
then the execution lock, the checks again on the locked row, the dedup claim and the insert.
A refusal before the claim writes nothing.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from workflows import conf
from workflows.engine import bounds, commands, db, locks, observers, pipeline, sql, teardown, wakeups
from workflows.engine.actors import NONE, Actor, sanitise
from workflows.engine.context import Drive
from workflows.engine.rows import RunQueue
from workflows.engine.settlement import named
from workflows.exceptions import (
    IdempotencyConflict,
    InstanceNotFound,
    InvalidPayload,
    LifecycleError,
    MigrationIllegalState,
    SignalLimit,
    SignalRejected,
    TaskNotFound,
    TaskNotWaiting,
    VersionNotRunnable,
    Violation,
)
from workflows.models import (
    ENDED_STATUSES,
    ActorKind,
    AttributionStatus,
    CommandKind,
    CommandStatus,
    RunStatus,
    TaskStatus,
)

SQL = sql.load("recording")


@dataclass(frozen=True)
class Recorded:
    """What a recording answers: the command (None for inline operations) and its run."""

    run_id: str
    command_id: int | None
    kind: str
    status: str
    seq: int | None
    replay: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.command_id, "run": self.run_id, "kind": self.kind, "status": self.status, "seq": self.seq}


def _check_key(key: str | None, what: str) -> None:
    bounds.check_key(key, what)


def _caller(actor: Actor) -> str:
    """The part of a dedup scope that names the caller: a key is one caller's, so another
    caller sending the same key records a command of its own and never reads the first
    caller's result. A digest keeps the scope column's width whatever the actor's id."""
    return hashlib.sha256(f"{actor.kind}\x1f{actor.id}".encode()).hexdigest()[:32]


def _dedup_find(kind: str, scope: str, key: str) -> dict[str, Any] | None:
    return db.fetchdict(SQL.dedup_find, [kind, scope, key])


def _dedup_claim(kind: str, scope: str, key: str, fp: str, run_id: Any, command_id: int | None) -> bool:
    return db.fetchone(SQL.dedup_claim, [kind, scope, key, fp, run_id, command_id]) is not None


def _dedup_point(kind: str, scope: str, key: str, command_id: int) -> None:
    db.execute(SQL.dedup_point, [command_id, kind, scope, key])


def _replay(found: dict[str, Any], fp: str, kind: str) -> Recorded:
    if found["fingerprint"] != fp:
        raise IdempotencyConflict("the idempotency key was used for another request")
    row = db.fetchdict(SQL.replayed_command, [found["command_id"]])
    if row is None:
        return Recorded(str(found["run_id"]), found["command_id"], kind, CommandStatus.COMPLETE, None, replay=True)
    return Recorded(str(row["run_id"]), row["id"], row["kind"], row["status"], row["seq"], replay=True)


def _absent(actor: Actor, kind: str) -> None:
    if actor.kind == ActorKind.NONE:
        observers.emit(observers.ActorAbsent(kind))


def _last(
    statement: tuple[str, list[Any]], idempotency_key: str | None, *, before: list[tuple[str, list[Any]]] | None = None
) -> tuple[Any, ...] | None:
    """A recording's command insert (``before``: statements sent ahead of it in the same round
    trip). When the operation opened the transaction itself and nothing follows (no dedup row
    to point at the command), the COMMIT travels with it."""
    if not idempotency_key and pipeline.may_commit():
        return pipeline.fetchone_and_commit(*statement, before=before or ())
    if before:
        return pipeline.fetch_batch([*before, statement])[-1]
    return db.fetchone(*statement, prepared=True)


# a START and its run row in one statement: the run's insert as a data-modifying CTE, the
# command's row selected from it (``commands.SQL.insert_selected``)
START_WITH_RUN = (
    f"WITH {SQL.start_admission}, r AS ({SQL.start_run}), "
    f"c AS ({commands.SQL.insert_selected} FROM r {commands.SQL.insert_returning}) {SQL.start_answer}"
)
# a COMPLETION and its task's reservation in one statement: the reservation names the command
# the CTE ``c`` inserts
COMPLETE_RESERVING = f"{commands.SQL.insert_counted}, {SQL.reserve_task} SELECT * FROM c"


# --- start ---------------------------------------------------------------------------------


def start(
    *,
    definition_id: str,
    payload: Any,
    version: int | None = None,
    scope: str | None = None,
    business_key: str = "",
    idempotency_key: str | None = None,
    actor: Actor = NONE,
    context: Any = None,
    parent: dict[str, Any] | None = None,
) -> Recorded:
    from workflows.definitions import schemas, selection, store

    start_scope = scope or "default"
    _check_key(idempotency_key, "idempotency key")
    if business_key and (len(business_key) > 255 or "\x00" in business_key):
        raise InvalidPayload(
            "business key must be at most 255 characters without NUL",
            violations=[Violation(pointer="/business_key", type="size", message="at most 255 characters, no NUL")],
        )
    # the bounds walk iteratively before anything encodes the payload (the fingerprint recurses)
    bounds.check_payload(payload)
    fp = commands.fingerprint({"definition_id": definition_id, "payload": payload, "business_key": business_key})
    dedup_scope = f"{start_scope}\x1f{definition_id}\x1f{_caller(actor)}"
    if idempotency_key:
        found = _dedup_find(CommandKind.START, dedup_scope, idempotency_key)
        if found is not None:
            return _replay_start(found, fp, version)
    # prepared, and the transaction's BEGIN travels with it (no round trip of its own)
    chosen = selection.select_for_start(
        start_scope=start_scope,
        definition_id=definition_id,
        version=version,
        fetch=lambda text, params: db.fetchall(text, params, prepared=True),
    )
    if chosen.start_schema:
        problems = schemas.validate(chosen.start_schema, payload)
        if problems:
            raise InvalidPayload(
                f"invalid start payload for {named(definition_id)} v{chosen.version}", violations=problems
            )
    run_id = uuid.uuid4()
    if idempotency_key and not _dedup_claim(CommandKind.START, dedup_scope, idempotency_key, fp, run_id, None):
        found = _dedup_find(CommandKind.START, dedup_scope, idempotency_key)
        assert found is not None
        return _replay_start(found, fp, version)
    parent = parent or {}
    pin = [chosen.scope, definition_id, chosen.version]
    run_params = [
        run_id,
        chosen.scope,
        definition_id,
        chosen.version,
        chosen.plan_hash,
        start_scope,
        business_key or "",
        db.jsonb(context),
        parent.get("run_id"),
        parent.get("step", ""),
        parent.get("branch", ""),
        int(parent.get("depth", 0)),
        *actor.columns(),
    ]
    # the run row already counts the START's position (next_seq 2): no second write of it;
    # both rows go in one statement (the run's insert as a data-modifying CTE)
    run: RunQueue = {"id": run_id, "next_seq": 1, "open_signals": 0}
    _, params, seq = commands.insert_statement(
        run,
        kind=CommandKind.START,
        actor=actor,
        payload=payload,
        dedup_key=idempotency_key or "",
        fp=fp,
        context=context,
    )
    # pin admission: the row's status read again in the insert itself, after the shared
    # definition lock (sent ahead in the same round trip) is held, so a deprecation or
    # retirement committed since the selection read is seen (READ COMMITTED), and none can
    # commit before this start does; above READ COMMITTED the row lock (``fence``) turns a
    # change after the caller's snapshot into a serialization failure (retryable)
    both = (START_WITH_RUN, [*pin, *pin, *run_params, *params])
    _absent(actor, CommandKind.START)
    lock = (store.LOCK_DEFINITION_ID_SHARED, [store.definition_lock_key(definition_id)])
    row = _last(both, idempotency_key, before=[lock])
    if row is None or row[0] is None:
        status = row[4] if row is not None else None
        key = f"version {chosen.version} of {named(definition_id)}"
        if status is None:
            raise VersionNotRunnable(f"{key} has no published row")
        raise LifecycleError(f"{key} is {str(status).lower()}; a start is admitted to an available version only")
    cmd = commands.inserted(row, seq, CommandKind.START)
    if idempotency_key:
        _dedup_point(CommandKind.START, dedup_scope, idempotency_key, cmd["id"])
    wakeups.wake(run_id)
    return Recorded(str(run_id), cmd["id"], CommandKind.START, CommandStatus.PENDING, cmd["seq"])


def _replay_start(found: dict[str, Any], fp: str, version: int | None) -> Recorded:
    if version is not None:
        pinned = db.fetchone(SQL.pinned_version, [found["run_id"]])
        if pinned is not None and int(pinned[0]) != int(version):
            raise IdempotencyConflict("the idempotency key was used for another version")
    return _replay(found, fp, CommandKind.START)


# --- signal --------------------------------------------------------------------------------


def _declared(run: dict[str, Any], name: str) -> bool:
    row = db.fetchone(SQL.declared_signals, [run["scope"], run["definition_id"], run["version"]])
    if row is None or (row[0] is None and row[1] is None):
        return True  # no declaration stored: the executor rejects an undeclared name
    names = set(row[0] or []) | set((row[1] or {}).keys())
    return name in names


def signal(
    *,
    run_id: Any,
    name: str,
    payload: Any = None,
    branch: str | None = None,
    idempotency_key: str | None = None,
    actor: Actor = NONE,
    context: Any = None,
) -> Recorded:
    _check_key(idempotency_key, "idempotency key")
    if not name or len(name) > 255:
        raise InvalidPayload(
            "signal name must be 1 to 255 characters",
            violations=[Violation(pointer="/name", type="size", message="1 to 255 characters")],
        )
    if branch is not None and len(branch) > 255:
        raise InvalidPayload(
            "branch id must be at most 255 characters",
            violations=[Violation(pointer="/branch", type="size", message="at most 255 characters")],
        )
    bounds.check_payload(payload, what=f"payload of signal {named(name)} for run {run_id}")  # before any encoding
    fp = commands.fingerprint({"name": name, "payload": payload})
    dedup_scope = f"{run_id}\x1f{branch or ''}\x1f{_caller(actor)}"
    if idempotency_key:
        found = _dedup_find(CommandKind.SIGNAL, dedup_scope, idempotency_key)
        if found is not None:
            return _replay(found, fp, CommandKind.SIGNAL)
    run = db.fetchdict(SQL.run_for_signal, [run_id])
    if run is None:
        raise InstanceNotFound("run not found")
    if run["status"] in ENDED_STATUSES:
        raise SignalRejected(f"run {run_id} has ended; signal {named(name)} refused")
    if not _declared(run, name):
        raise SignalRejected(f"signal {named(name)} is not declared for run {run_id} (version {run['version']})")
    bounds.check_payload(payload, what=f"payload of signal {named(name)} for run {run_id}")
    locked = locks.lock_run(run_id)
    if idempotency_key:
        found = _dedup_find(CommandKind.SIGNAL, dedup_scope, idempotency_key)
        if found is not None:
            return _replay(found, fp, CommandKind.SIGNAL)
    if locked["status"] in ENDED_STATUSES:
        raise SignalRejected(f"run {run_id} has ended; signal {named(name)} refused")
    limit = conf.get().RECORDING.MAX_OPEN_SIGNALS_PER_INSTANCE
    raised = db.fetchone(SQL.raise_open_signals, [run_id, limit])
    if raised is None:
        raise SignalLimit(f"run {run_id} has {limit} open signals; signal {named(name)} refused")
    locked["open_signals"] = int(raised[0])
    target: dict[str, Any] = {"name": name}
    if branch:
        target["branch"] = branch
    if idempotency_key and not _dedup_claim(CommandKind.SIGNAL, dedup_scope, idempotency_key, fp, run_id, None):
        raise IdempotencyConflict("the idempotency key is being used concurrently")
    cmd = commands.insert(
        locked,
        kind=CommandKind.SIGNAL,
        actor=actor,
        payload=payload,
        target=target,
        dedup_key=idempotency_key or "",
        fp=fp,
        context=context,
        persist_counters=True,
    )
    if idempotency_key:
        _dedup_point(CommandKind.SIGNAL, dedup_scope, idempotency_key, cmd["id"])
    _absent(actor, CommandKind.SIGNAL)
    wakeups.wake(run_id)
    return Recorded(str(run_id), cmd["id"], CommandKind.SIGNAL, CommandStatus.PENDING, cmd["seq"])


# --- task completion and reassignment -------------------------------------------------------


def _task_decision_checks(task: dict[str, Any], decision: str, payload: Any) -> None:
    """Lock-free: bounds, then the snapshot's schema for the decision (value-free errors)."""
    from workflows.definitions import schemas

    bounds.check_payload(payload if payload is not None else {})
    snapshot = {d["name"]: d for d in (task["decisions"] or [])}
    chosen = snapshot.get(decision)
    if chosen is None:
        return  # decided under the lock
    schema = chosen.get("schema")
    if schema is None:
        if payload not in (None, {}):
            raise InvalidPayload(
                "this decision takes no payload",
                violations=[Violation(pointer="", type="payload", message="this decision takes no payload")],
            )
        return
    problems = schemas.validate(schema, payload if payload is not None else {})
    if problems:
        raise InvalidPayload("invalid decision payload", violations=problems)


def complete_task(
    *,
    task_id: Any,
    decision: str,
    payload: Any = None,
    expected_assignment: dict[str, Any] | None = None,
    subject_version: str | None = None,
    idempotency_key: str | None = None,
    actor: Actor = NONE,
) -> Recorded:
    _check_key(idempotency_key, "idempotency key")
    bounds.check_payload(payload if payload is not None else {})  # before any encoding
    fp = commands.fingerprint({"decision": decision, "payload": payload, "subject_version": subject_version})
    dedup_scope = f"{task_id}\x1f{_caller(actor)}"
    if idempotency_key:
        found = _dedup_find(CommandKind.COMPLETION, dedup_scope, idempotency_key)
        if found is not None:
            return _replay(found, fp, CommandKind.COMPLETION)
    task = db.fetchdict(SQL.task_for_completion, [task_id], prepared=True)
    if task is None:
        raise TaskNotFound("task not found")
    _task_decision_checks(task, decision, payload)
    # the lock and the task's locked read in one round trip
    run, task = locks.lock_run_and_read(task["run_id"], SQL.task_for_completion_locked, [task_id])
    if idempotency_key:
        found = _dedup_find(CommandKind.COMPLETION, dedup_scope, idempotency_key)
        if found is not None:
            return _replay(found, fp, CommandKind.COMPLETION)
    assert task is not None
    if task["status"] != TaskStatus.OPEN:
        raise TaskNotWaiting(f"task {task_id} is not waiting for a decision")
    if expected_assignment is not None and (
        str(expected_assignment.get("mode", "")).replace("role", "group") != task["assignment_mode"]
        or str(expected_assignment.get("value", "")) != task["assignment_value"]
    ):
        raise TaskNotWaiting(f"task {task_id} was reassigned")
    if task["require_version_stability"] and str(subject_version or "") != str(run["subject_version"] or ""):
        raise TaskNotWaiting(f"task {task_id}: the reviewed subject version is stale")
    if decision not in {d["name"] for d in (task["decisions"] or [])}:
        raise InvalidPayload(
            "the decision is not offered by this task",
            violations=[Violation(pointer="/decision", type="decision", message="not offered by this task")],
        )
    if idempotency_key and not _dedup_claim(CommandKind.COMPLETION, dedup_scope, idempotency_key, fp, run["id"], None):
        raise IdempotencyConflict("the idempotency key is being used concurrently")
    target = {
        "decision": decision,
        "payload": payload,
        "subject_version": subject_version,
        "completed_by": actor.id or actor.reason,
    }
    _, params, seq = commands.insert_statement(
        run,
        kind=CommandKind.COMPLETION,
        actor=actor,
        target=target,
        task_id=task_id,
        dedup_key=idempotency_key or "",
        fp=fp,
        persist_counters=True,
    )
    both = (COMPLETE_RESERVING, [*params, task_id])
    _absent(actor, CommandKind.COMPLETION)
    cmd = commands.inserted(_last(both, idempotency_key), seq, CommandKind.COMPLETION)
    if idempotency_key:
        _dedup_point(CommandKind.COMPLETION, dedup_scope, idempotency_key, cmd["id"])
    wakeups.wake(run["id"])
    return Recorded(str(run["id"]), cmd["id"], CommandKind.COMPLETION, CommandStatus.PENDING, cmd["seq"])


def reassign_task(*, task_id: Any, mode: str, value: str, actor: Actor = NONE) -> None:
    """Inline, in the caller's transaction: a COMPLETING task refuses (TASK_NOT_WAITING)."""
    mode = "group" if mode == "role" else mode
    if mode not in ("user", "group") or not value or len(value) > 255:
        raise InvalidPayload(
            "assignment must be user or group with a name",
            violations=[Violation(pointer="/mode", type="enum", message="user or group")],
        )
    task = db.fetchdict(SQL.run_of_task, [task_id])
    if task is None:
        raise TaskNotFound("task not found")
    run = locks.lock_run(task["run_id"])
    locked = db.fetchdict(SQL.task_to_reassign, [task_id])
    assert locked is not None
    if locked["status"] != TaskStatus.OPEN:
        raise TaskNotWaiting(f"task {task_id} is not waiting for a decision")
    db.execute(SQL.reassign_task, [mode, value, task_id])
    drive = Drive.for_run(run, None, actor)
    drive.history.add(
        "TASK_REASSIGNED",
        step=locked["step"],
        branch_id=locked["branch_id"],
        actor=actor,
        payload={"task": str(task_id), "assignment": {"mode": mode, "value": value}},
    )
    from workflows.engine import outbox

    outbox.notify_task(
        drive, task_id=locked["id"], reason=f"reassigned-{drive.history.next_seq}", assignment=(mode, value)
    )
    drive.save()


# --- cancel, retry, migrate ------------------------------------------------------------------


def cancel(*, run_id: Any, reason: str = "", actor: Actor = NONE) -> None:
    """Cancel the run, everything it holds and every run it called, and every run waiting on
    it at a call (callers first). Refuses an ended run (SignalRejected)."""
    # lock order caller → child: the call chain above the run is locked before the run
    callers = teardown.lock_callers(run_id)
    run = locks.lock_run(run_id)
    if run["status"] in ENDED_STATUSES:
        raise SignalRejected(f"run {run_id} has ended (status {run['status']})")
    teardown.cancel_with_callers(run, callers, actor=actor, reason=sanitise(reason) if reason else "")


def retry(*, run_id: Any, actor: Actor = NONE) -> Recorded:
    run = locks.lock_run(run_id)
    if run["status"] in ENDED_STATUSES:
        raise SignalRejected(f"run {run_id} has ended (status {run['status']})")
    has_dead = db.fetchone(SQL.has_dead, [run_id])
    if run["status"] != RunStatus.FAILED and has_dead is None:
        raise SignalRejected(f"run {run_id} has nothing to retry (status {run['status']})")
    pending = db.fetchdict(SQL.pending_retry, [run_id])
    if pending is not None:
        return Recorded(str(run_id), pending["id"], CommandKind.RETRY, pending["status"], pending["seq"], replay=True)
    cmd = commands.insert(run, kind=CommandKind.RETRY, actor=actor, persist_counters=True)
    _absent(actor, CommandKind.RETRY)
    wakeups.wake(run_id)
    return Recorded(str(run_id), cmd["id"], CommandKind.RETRY, CommandStatus.PENDING, cmd["seq"])


def migrate(
    *,
    run_id: Any,
    target_version: int,
    target_scope: str | None = None,
    target_step: str | None = None,
    action: str = "move",
    actor: Actor = NONE,
    migration_id: int | None = None,
    expected_step: str | None = None,
    expected_version: int | None = None,
) -> Recorded:
    run = locks.lock_run(run_id)
    if run["status"] in ENDED_STATUSES:
        raise MigrationIllegalState(f"run {run_id} has ended (status {run['status']})")
    if target_scope is not None and target_scope not in (run["scope"], run["start_scope"], "default"):
        raise MigrationIllegalState("target scope not admitted")
    if action not in ("move", "cancel", "end"):
        raise InvalidPayload(
            "action must be move, cancel or end",
            violations=[Violation(pointer="/action", type="enum", message="move, cancel or end")],
        )
    target = {
        "version": int(target_version),
        "scope": target_scope or run["scope"],
        "step": target_step,
        "action": action,
        "migration": migration_id,
    }
    if expected_step is not None:
        # a position move: the handler leaves a run that moved on since it was selected alone
        target["expected_step"] = expected_step
        target["expected_version"] = int(expected_version) if expected_version is not None else None
    pending = db.fetchdict(SQL.pending_migration, [run_id])
    if pending is not None:
        if (pending["target"] or {}) == target:
            return Recorded(
                str(run_id), pending["id"], CommandKind.MIGRATION, pending["status"], pending["seq"], replay=True
            )
        raise MigrationIllegalState("another migration of this run is pending")
    cmd = commands.insert(run, kind=CommandKind.MIGRATION, actor=actor, target=target, persist_counters=True)
    _absent(actor, CommandKind.MIGRATION)
    wakeups.wake(run_id)
    return Recorded(str(run_id), cmd["id"], CommandKind.MIGRATION, CommandStatus.PENDING, cmd["seq"])


def record_resume(*, parent_id: Any, child_id: str, status: str, result: Any, step: str) -> None:
    """A called run ended: record a RESUME command on its caller (once per child)."""
    from django.db import transaction

    with transaction.atomic():
        if not _dedup_claim(CommandKind.RESUME, str(parent_id), child_id, "", parent_id, None):
            return
        run = locks.lock_run(parent_id)
        if run["status"] in ENDED_STATUSES:
            return
        cmd = commands.insert(
            run,
            kind=CommandKind.RESUME,
            actor=Actor(kind=ActorKind.SYSTEM, reason="called run ended", status=AttributionStatus.VERIFIED),
            target={"child": child_id, "status": status, "step": step},
            payload=result,
            persist_counters=True,
        )
        wakeups.wake(parent_id)
        del cmd
