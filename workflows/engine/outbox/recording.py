"""Recording of intents: side effects a segment decided on, written in its transaction.

Kinds: SERVICE and COMPENSATION (a registered handler or a signed webhook), NOTIFY (task
emails to assignees), RESUME (a child run ended: record a RESUME command on its caller).
An intent recorded here is handed to ``delivery`` after commit (claimed inline, or woken);
it is delivered at least once, and receivers get an idempotency key. Statements:
``engine/sql/outbox_recording.sql``.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from workflows import users
from workflows.engine import db, pipeline, sql, wakeups
from workflows.engine.actors import Actor
from workflows.engine.context import Drive
from workflows.models import OutboxIntent

SQL = sql.load("outbox_recording")


def lease_seconds() -> int:
    """A delivery's claim outlasts one whole attempt: the attempt's deadline
    (``OUTBOUND.ATTEMPT_SECONDS``) plus an executor lease, so the sweep never hands an intent
    whose attempt is still running to a second worker."""
    from workflows import conf

    settings = conf.get()
    return int(settings.EXECUTOR.LEASE_SECONDS) + int(settings.OUTBOUND.ATTEMPT_SECONDS)


def attribution_headers(actor: Actor, *, full: bool) -> dict[str, str]:
    headers = {"x-workflow-actor-kind": actor.kind, "x-workflow-attribution": actor.status}
    if full:
        if actor.id:
            headers["x-workflow-actor-id"] = actor.id
        if actor.reason:
            headers["x-workflow-actor-reason"] = actor.reason
        if actor.on_behalf_of:
            headers["x-workflow-on-behalf-of"] = actor.on_behalf_of
    return headers


def strip_forged(headers: dict[str, Any] | None) -> dict[str, str]:
    """Application-set x-workflow-* headers are removed (any case) before ours are added."""
    return {str(k): str(v) for k, v in (headers or {}).items() if not str(k).lower().startswith("x-workflow-")}


def _insert(
    drive: Drive,
    *,
    step: str,
    kind: str,
    target: str,
    payload: Any,
    key: str,
    headers: dict[str, str],
) -> None:
    """Record an intent. Under ``wakeups.inline_delivery()`` a RESUME intent or a registered
    handler's call is claimed here, in the segment's transaction, for this process to deliver
    after commit; a webhook is woken for the outbound worker, and compensations go out one at
    a time, in order, through the claim in ``delivery``. Task notices have their own
    statement (``notice_statement``)."""
    row_target = target[:2048]
    params = [drive.run["id"], drive.command_id, step, kind, row_target, db.jsonb(payload), db.jsonb(headers), key]
    # only work done in this process is delivered by the executor's own process: the resume of
    # a caller (a command recorded in this database) and a registered handler's call. A webhook
    # waits on another party, so it goes to the outbound queue's worker
    # (WORKFLOWS["OUTBOUND"]["QUEUE"]), never the executor's.
    in_process = kind == "RESUME" or (kind == "SERVICE" and plain_name(target))
    inline = in_process and wakeups.delivers_inline()
    token = uuid.uuid4() if inline else None
    if inline:
        statement = SQL.insert.format(lease="now() + make_interval(secs => %s)")
        params += [OutboxIntent.Status.DELIVERING, 1, token, lease_seconds()]
    else:
        statement = SQL.insert.format(lease="NULL")
        params += [OutboxIntent.Status.PENDING, 0, None]

    def then(row: tuple[Any, ...] | None) -> None:
        if row is not None:  # else recorded before (the same key)
            _recorded(
                drive,
                int(row[0]),
                token,
                step=step,
                kind=kind,
                target=row_target,
                payload=payload,
                key=key,
                headers=headers,
            )

    # nothing before the commit needs the intent's id: it travels with the segment's next statement
    pipeline.defer(statement, params, then)


def _recorded(
    drive: Drive,
    intent_id: int,
    token: Any,
    *,
    step: str,
    kind: str,
    target: str,
    payload: Any,
    key: str,
    headers: dict[str, str],
) -> None:
    """An intent to deliver was inserted: one of the segment's effects, handed to this process
    after commit when ``token`` says it was claimed inline, else woken for delivery."""
    drive.effects.append(intent_id)
    if token is not None:
        wakeups.deliver_claimed(
            {
                "id": intent_id,
                "run_id": drive.run["id"],
                "command_id": drive.command_id,
                "step": step,
                "kind": kind,
                "target": target,
                # what the claim in ``delivery`` would read back from the row
                "payload": db.loads(db.dumps(payload)) if payload is not None else None,
                "headers": db.loads(db.dumps(headers)),
                "idempotency_key": key,
                "attempts": 1,
                "token": token,
            }
        )
    else:
        wakeups.deliver(intent_id)


def notice_statement(
    drive: Drive, *, task_id: UUID, reason: str, assignment: tuple[str, str], seq: int = 0
) -> tuple[tuple[str, list[Any]], Any]:
    """The insert of a task notice with its recipient look-up, for a caller that batches it;
    hand its row and the second value to ``notice_recorded``."""
    recipients_sql, recipients_params = recipients_statement(*assignment)
    key = f"notify:{task_id}:{reason}:{seq}"
    inline = False  # an e-mail waits on the mail server: the outbound queue's worker sends it
    token = uuid.uuid4() if inline else None
    params = [
        drive.run["id"],
        drive.command_id,
        str(task_id),
        db.jsonb({"reason": reason}),
        db.jsonb({}),
        key,
        OutboxIntent.Status.DELIVERING if inline else OutboxIntent.Status.PENDING,
        1 if inline else 0,
        token,
        inline,
        lease_seconds(),
        *recipients_params,
    ]
    return (SQL.insert_notice.format(recipients=recipients_sql), params), (task_id, reason, key, token)


def notice_recorded(drive: Drive, row: tuple[Any, ...] | None, context: Any) -> int:
    if row is None:
        return 0  # recorded before (the same key)
    intent_id, status = int(row[0]), row[1]
    if status == OutboxIntent.Status.DELIVERED:
        return intent_id  # nobody to notify: nothing to deliver
    task_id, reason, key, token = context
    _recorded(
        drive,
        intent_id,
        token,
        step="",
        kind="NOTIFY",
        target=str(task_id),
        payload={"reason": reason},
        key=key,
        headers={},
    )
    return intent_id


def record(
    drive: Drive, *, step: str, kind: str, target: str, payload: Any, headers: dict[str, Any] | None = None
) -> str:
    """Record a dispatch; answers its idempotency key (the receiver gets it with every attempt)."""
    key = f"{drive.run['id']}:{drive.command_id}:{step}:{drive.steps}"
    merged = strip_forged(headers)
    merged.update(attribution_headers(drive.actor, full=True))
    merged["idempotency-key"] = key
    drive.history.add(
        "SERVICE_DISPATCHED",
        step=step,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"target": target if plain_name(target) else "[webhook]"},
    )
    _insert(drive, step=step, kind=kind, target=target, payload=payload, key=key, headers=merged)
    return key


def compensate(drive: Drive, *, forward_step: str, compensation_step: str) -> None:
    plan = drive.plan
    assert plan is not None
    from workflows.definitions.plan import CompensationStep

    comp = plan.steps.get(compensation_step)
    if not isinstance(comp, CompensationStep):
        return
    state = drive.run["state"]
    from workflows.engine.evaluate import evaluate

    payload = (
        evaluate(comp.payload, {"state": state}, step=compensation_step, field="payload")
        if comp.payload is not None
        else state
    )
    key = f"{drive.run['id']}:compensate:{compensation_step}:{forward_step}"
    headers = attribution_headers(drive.actor, full=True)
    headers["idempotency-key"] = key
    drive.history.add(
        "COMPENSATION_DISPATCHED",
        step=compensation_step,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"forward_step": forward_step},
    )
    _insert(
        drive,
        step=compensation_step,
        kind="COMPENSATION",
        target=comp.target,
        payload=payload,
        key=key,
        headers=headers,
    )


def notify_task(
    drive: Drive, *, task_id: UUID, reason: str, seq: int = 0, assignment: tuple[str, str] | None = None
) -> int:
    """A task notice (an email to the assignees with an address). When no assignee has one,
    the notice is recorded as delivered at once: its delivery would send nothing."""
    if assignment is None:
        row = db.fetchone(SQL.task_assignment, [task_id])
        assignment = (str(row[0]), str(row[1])) if row else ("", "")
    statement, context = notice_statement(drive, task_id=task_id, reason=reason, assignment=assignment, seq=seq)
    return notice_recorded(drive, db.fetchone(*statement, prepared=True), context)


def _recipients(mode: str, value: str) -> Any:
    """The assignees' active accounts with an email address (a queryset; the host's user
    model through ``workflows.users``: its ``USERNAME_FIELD`` and ``EMAIL_FIELD``)."""
    return users.assignees(mode, value).exclude(**{users.email_field(): ""})


_RECIPIENT_SQL: dict[str, tuple[str, list[Any], int]] = {}
_PLACEHOLDER = "\x00assignee\x00"


def recipients_statement(mode: str, value: str) -> tuple[str, list[Any]]:
    """Whether any assignee can receive a notice (a row when one can): the ORM's SQL for each
    mode is compiled once per process (with a placeholder value) and then run as a prepared statement, since this
    runs in the segment of every task that opens."""
    mode = "user" if mode == "user" else "group"
    compiled = _RECIPIENT_SQL.get(mode)
    if compiled is None:
        sql, params = _recipients(mode, _PLACEHOLDER).values_list("pk", flat=True)[:1].query.sql_with_params()
        compiled = (sql, list(params), list(params).index(_PLACEHOLDER))
        _RECIPIENT_SQL[mode] = compiled
    sql, params, index = compiled
    bound = list(params)
    bound[index] = value
    return sql, bound


def resume_parent(drive: Drive, *, status: str) -> None:
    run = drive.run
    key = f"resume:{run['id']}"
    payload = {"child": str(run["id"]), "status": status, "state": run["state"]}
    _insert(
        drive,
        step=run.get("parent_step") or "",
        kind="RESUME",
        target=str(run["parent_run_id"]),
        payload=payload,
        key=key,
        headers={},
    )


def plain_name(target: str) -> bool:
    """A registered handler's name (not a webhook URL)."""
    return not target.startswith(("http://", "https://"))
