"""The outbox: side effects a segment decided on, recorded in its transaction and delivered
after commit (at least once; receivers get an idempotency key).

Kinds: SERVICE and COMPENSATION (a registered handler or a signed webhook), NOTIFY (task
emails to assignees), RESUME (a child run ended: record a RESUME command on its caller).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
import uuid
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction

from workflows.engine import db, faults, mail, wakeups, webhooks
from workflows.engine.actors import Actor
from workflows.engine.context import Drive

log = logging.getLogger("workflows.engine")
MAX_DELIVERY_ATTEMPTS = 10


def lease_seconds() -> int:
    """A delivery's claim lasts as long as an executor lease (WORKFLOWS EXECUTOR.LEASE_SECONDS)."""
    from workflows import conf

    return int(conf.get().EXECUTOR.LEASE_SECONDS)


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


INSERT = (
    "INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key, "
    "status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at) "
    "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,now(),'',now(),%s,{lease},NULL) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)


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
    """Record an intent. Under ``wakeups.inline_delivery()`` the intent is claimed here, in the
    segment's transaction, for this process to deliver after commit (compensations excepted:
    they go out one at a time, in order, through the claim below). Task notices have their own
    statement (``notice_statement``)."""
    row_target = target[:2048]
    params = [drive.run["id"], drive.command_id, step, kind, row_target, db.jsonb(payload), db.jsonb(headers), key]
    inline = kind != "COMPENSATION" and wakeups.delivers_inline()
    token = uuid.uuid4() if inline else None
    if inline:
        sql = INSERT.format(lease="now() + make_interval(secs => %s)")
        params += ["DELIVERING", 1, token, lease_seconds()]
    else:
        sql = INSERT.format(lease="NULL")
        params += ["PENDING", 0, None]

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
    db.defer(sql, params, then)


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
                # what the claim below would read back from the row
                "payload": db.loads(db.dumps(payload)) if payload is not None else None,
                "headers": db.loads(db.dumps(headers)),
                "idempotency_key": key,
                "attempts": 1,
                "token": token,
            }
        )
    else:
        wakeups.deliver(intent_id)


# -- name: insert_notice
# A task notice whose recipients are looked up in the same statement: delivered at once when
# nobody can receive it, else PENDING, or claimed for this process (inline delivery).
INSERT_NOTICE = (
    "INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key, "
    "status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at) "
    "SELECT %s, %s, '', 'NOTIFY', %s, %s, %s, %s, CASE WHEN r.found THEN %s ELSE 'DELIVERED' END, "
    "CASE WHEN r.found THEN %s ELSE 0 END, now(), '', now(), CASE WHEN r.found THEN %s::uuid END, "
    "CASE WHEN r.found AND %s THEN now() + make_interval(secs => %s) END, CASE WHEN r.found THEN NULL ELSE now() END "
    "FROM (SELECT EXISTS ({recipients}) AS found) r "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, status"
)


def notice_statement(
    drive: Drive, *, task_id: UUID, reason: str, assignment: tuple[str, str], seq: int = 0
) -> tuple[tuple[str, list[Any]], Any]:
    """The insert of a task notice with its recipient look-up, for a caller that batches it;
    hand its row and the second value to ``notice_recorded``."""
    recipients_sql, recipients_params = recipients_statement(*assignment)
    key = f"notify:{task_id}:{reason}:{seq}"
    inline = wakeups.delivers_inline()
    token = uuid.uuid4() if inline else None
    params = [
        drive.run["id"],
        drive.command_id,
        str(task_id),
        db.jsonb({"reason": reason}),
        db.jsonb({}),
        key,
        "DELIVERING" if inline else "PENDING",
        1 if inline else 0,
        token,
        inline,
        lease_seconds(),
        *recipients_params,
    ]
    return (INSERT_NOTICE.format(recipients=recipients_sql), params), (task_id, reason, key, token)


def notice_recorded(drive: Drive, row: tuple[Any, ...] | None, context: Any) -> int:
    if row is None:
        return 0  # recorded before (the same key)
    intent_id, status = int(row[0]), row[1]
    if status == "DELIVERED":
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
) -> None:
    key = f"{drive.run['id']}:{drive.command_id}:{step}:{drive.steps}"
    merged = strip_forged(headers)
    merged.update(attribution_headers(drive.actor, full=True))
    merged["idempotency-key"] = key
    drive.history.add(
        "SERVICE_DISPATCHED",
        step=step,
        command_id=drive.command_id,
        actor=drive.actor,
        payload={"target": target if _plain_name(target) else "[webhook]"},
    )
    _insert(drive, step=step, kind=kind, target=target, payload=payload, key=key, headers=merged)


def compensate(drive: Drive, *, forward_step: str, compensation_step: str) -> None:
    plan = drive.plan
    assert plan is not None
    from workflows.definitions.plan import CompensationStep

    comp = plan.steps.get(compensation_step)
    if not isinstance(comp, CompensationStep):
        return
    state = drive.run["state"]
    payload = comp.payload.evaluate({"state": state}) if comp.payload is not None else state
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
        row = db.fetchone("SELECT assignment_mode, assignment_value FROM workflow_tasks WHERE id = %s", [task_id])
        assignment = (str(row[0]), str(row[1])) if row else ("", "")
    statement, context = notice_statement(drive, task_id=task_id, reason=reason, assignment=assignment, seq=seq)
    return notice_recorded(drive, db.fetchone(*statement, prepared=True), context)


def _recipients(mode: str, value: str) -> Any:
    """The assignees' active accounts with an email address (a queryset)."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    if mode == "user":
        return users.filter(username=value)
    return users.filter(groups__name=value)


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


def _plain_name(target: str) -> bool:
    return not target.startswith(("http://", "https://"))


# --- delivery (called by a Celery task with an id, and by the sweep) ----------------------


def _claim(intent_id: int) -> dict[str, Any] | None:
    return db.fetchdict(
        "UPDATE workflow_outbox o SET status = 'DELIVERING', attempts = attempts + 1, token = gen_random_uuid(), "
        "lease_until = now() + make_interval(secs => %s) WHERE o.id = %s AND o.available_at <= now() AND "
        "(o.status = 'PENDING' OR (o.status = 'DELIVERING' AND o.lease_until < now())) "
        # compensations of one run go out one at a time, in the order they were recorded
        "AND NOT (o.kind = 'COMPENSATION' AND EXISTS (SELECT 1 FROM workflow_outbox e WHERE e.run_id = o.run_id "
        "AND e.kind = 'COMPENSATION' AND e.id < o.id AND e.status IN ('PENDING','DELIVERING'))) "
        "RETURNING o.id, o.run_id, o.command_id, o.step, o.kind, o.target, o.payload, o.headers, "
        "o.idempotency_key, o.attempts, o.token",
        [lease_seconds(), intent_id],
    )


def deliver(intent_id: int) -> str:
    """Deliver one intent if it is due and unclaimed. Answers the resulting status."""
    with transaction.atomic():
        intent = _claim(intent_id)
    if intent is None:
        return "SKIPPED"
    return deliver_claimed(intent)


# A delivered mark commits asynchronously (one statement, outside any transaction): a mark lost
# in a server crash leaves the intent DELIVERING until its lease lapses and it is delivered
# again, which at-least-once delivery (receivers get the idempotency key) already allows.
MARK_DELIVERED = (
    "UPDATE workflow_outbox SET status = 'DELIVERED', delivered_at = now(), token = NULL, lease_until = NULL "
    "FROM (SELECT {async_commit}) s WHERE id = %s AND token = %s"
)


# Carried marks. In a worker (``enable_carried_marks``), the delivered mark of an intent this
# process claimed inline is not a transaction of its own: it is kept in memory and written by
# the next wake-up's claim statement (``take_marks``), or, when no wake-up comes within
# CARRY_SECONDS, by a flusher thread on its own connection. Under load that saves one commit
# per intent; a worker that dies holding marks leaves those intents DELIVERING until their
# lease lapses and they are delivered again, as at-least-once delivery already allows.
# Compensations are never carried: the next one of a run goes out only after this one's mark.
CARRY_SECONDS = 0.05
# The flusher keeps its connection while it is used (a new one for every lone mark would cost
# far more than the transaction it saves) and closes it after this long without a mark.
FLUSHER_IDLE_SECONDS = 60.0
MARK_MANY = "SELECT set_config('synchronous_commit', 'off', true), workflow_outbox_delivered(%s::bigint[], %s::uuid[])"


class _Marks:
    """The delivered marks this process still owes the database (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[int, Any]] = []
        self.oldest: float | None = None
        self.enabled = False
        self._wake = threading.Event()
        self._flusher_pid: int | None = None

    def add(self, intent_id: int, token: Any) -> None:
        with self.lock:
            self.items.append((intent_id, token))
            if self.oldest is None:
                self.oldest = time.monotonic()
        self._ensure_flusher()
        self._wake.set()

    def take(self) -> list[tuple[int, Any]]:
        with self.lock:
            items, self.items, self.oldest = self.items, [], None
        return items

    def restore(self, items: list[tuple[int, Any]]) -> None:
        if not items:
            return
        with self.lock:
            self.items[:0] = items
            if self.oldest is None:
                self.oldest = time.monotonic()
        self._wake.set()

    def age(self) -> float | None:
        with self.lock:
            return None if self.oldest is None else time.monotonic() - self.oldest

    def _ensure_flusher(self) -> None:
        if self._flusher_pid == os.getpid():
            return
        self._flusher_pid = os.getpid()  # a forked pool process starts its own
        threading.Thread(target=self._flush_loop, name="workflow-delivered-marks", daemon=True).start()

    def _flush_loop(self) -> None:
        while True:
            if not self._wake.wait(timeout=FLUSHER_IDLE_SECONDS):
                connection.close()  # idle this long: this thread's own connection goes back
                continue
            self._wake.clear()
            self._flush_when_due()

    def _flush_when_due(self) -> None:
        while (age := self.age()) is not None:
            if age < CARRY_SECONDS:
                time.sleep(CARRY_SECONDS - age)
                continue
            try:
                flush_marks()
            except Exception:
                log.warning("writing delivered marks failed; retrying", exc_info=True)
                connection.close()
                time.sleep(1.0)


_marks = _Marks()


def enable_carried_marks(enabled: bool = True) -> None:
    """A worker process carries delivered marks on its next claim (see CARRY_SECONDS)."""
    _marks.enabled = enabled


def take_marks() -> list[tuple[int, Any]]:
    """The marks a claim statement about to run in its own transaction should write; hand
    them back with ``restore_marks`` when that statement fails."""
    return _marks.take() if _marks.items else []


def restore_marks(items: list[tuple[int, Any]]) -> None:
    _marks.restore(items)


def flush_marks() -> int:
    """Write the carried marks now (one asynchronous commit). Answers how many were written."""
    items = _marks.take()
    if not items:
        return 0
    try:
        db.execute(MARK_MANY, [[i for i, _ in items], [t for _, t in items]], prepared=True)
    except BaseException:
        _marks.restore(items)
        raise
    return len(items)


def deliver_claimed(intent: dict[str, Any]) -> str:
    """Deliver an intent this process has claimed (a row read by the claim, or the record of
    an inline claim). Answers the resulting status."""
    intent_id = intent["id"]
    try:
        _perform(intent)
        faults.point("outbox_delivery")  # the receiver has it; the intent is not DELIVERED yet
    except Exception as exc:  # noqa: BLE001 - any failure of a receiver is retried, then dead
        log.warning("outbox delivery failed for intent %s (%s)", intent_id, type(exc).__name__)
        # a refusal that every attempt would repeat (a message that cannot be built, a target
        # the network policy refuses) is dead at once, with its value-free reason
        permanent = isinstance(exc, mail.Unsendable | webhooks.UndeliverableTarget)
        dead = permanent or intent["attempts"] >= MAX_DELIVERY_ATTEMPTS
        error = (
            f"DELIVERY_REFUSED: {getattr(exc, 'reason', 'refused')}"
            if permanent
            else f"DELIVERY_FAILED: attempt {intent['attempts']} failed"
        )
        db.execute(
            "UPDATE workflow_outbox SET status = %s, token = NULL, lease_until = NULL, last_error = %s, "
            "available_at = now() + make_interval(secs => %s) WHERE id = %s AND token = %s",
            [
                "DEAD" if dead else "PENDING",
                error,
                min(2 ** intent["attempts"], 300),
                intent_id,
                intent["token"],
            ],
        )
        return "DEAD" if dead else "RETRY"
    if _marks.enabled and intent["kind"] != "COMPENSATION" and wakeups.delivers_inline():
        _marks.add(intent_id, intent["token"])
        return "DELIVERED"
    asynchronous = "NULL" if connection.in_atomic_block else "set_config('synchronous_commit', 'off', true)"
    db.execute(MARK_DELIVERED.format(async_commit=asynchronous), [intent_id, intent["token"]], prepared=True)
    _release_next_compensation(intent)
    return "DELIVERED"


def _release_next_compensation(intent: dict[str, Any]) -> None:
    if intent["kind"] != "COMPENSATION":
        return
    row = db.fetchone(
        "SELECT id FROM workflow_outbox WHERE run_id = %s AND kind = 'COMPENSATION' AND status = 'PENDING' "
        "ORDER BY id LIMIT 1",
        [intent["run_id"]],
    )
    if row and wakeups._intent_notifier is not None:
        wakeups._intent_notifier([int(row[0])])


def _perform(intent: dict[str, Any]) -> None:
    kind = intent["kind"]
    if kind in ("SERVICE", "COMPENSATION"):
        target = intent["target"]
        if _plain_name(target):
            from workflows.engine.evaluate import call_callback

            call_callback(
                target,
                "service",
                {
                    "payload": intent["payload"],
                    "headers": dict(intent["headers"] or {}),
                    "idempotency_key": intent["idempotency_key"],
                },
            )
        else:
            _webhook(target, intent)
    elif kind == "NOTIFY":
        _notify(intent)
    elif kind == "RESUME":
        from workflows.engine import recording

        recording.record_resume(
            parent_id=intent["target"],
            child_id=intent["payload"]["child"],
            status=intent["payload"]["status"],
            result=intent["payload"].get("state"),
            step=intent["step"],
        )
    else:  # pragma: no cover - kinds are written by this module only
        raise ValueError("unknown intent kind")


def _webhook(url: str, intent: dict[str, Any]) -> None:
    body = db.dumps(intent["payload"]).encode("utf-8")  # decimals exact, as stored
    from workflows import conf

    signature = hmac.new(conf.webhook_signing_key(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "x-switchyard-signature": f"sha256={signature}"}
    headers.update({k: v for k, v in (intent["headers"] or {}).items()})
    # a vetted public address (or an allowed network), no redirect followed: see webhooks.py
    if webhooks.post(url, body, headers, timeout=10) >= 300:
        raise RuntimeError("webhook answered an error status")


def _notify(intent: dict[str, Any]) -> None:
    from django.contrib.auth import get_user_model

    task = db.fetchdict(
        "SELECT id, title, assignment_mode, assignment_value, status FROM workflow_tasks WHERE id = %s",
        [intent["target"]],
    )
    if task is None or task["status"] not in ("OPEN", "COMPLETING"):
        return
    users = get_user_model().objects.filter(is_active=True)
    if task["assignment_mode"] == "user":
        users = users.filter(username=task["assignment_value"])
    else:
        users = users.filter(groups__name=task["assignment_value"])
    recipients = sorted({u.email for u in users if u.email})
    # an address the mail backend would refuse (stored without the form's validation) is
    # skipped, so one bad account neither fails the notice nor keeps the others from it
    recipients = [r for r in recipients if mail.valid_address(r)]
    if not recipients:
        return
    link = f"{getattr(settings, 'SITE_URL', '').rstrip('/')}/tasks/{task['id']}/"
    reason = (intent["payload"] or {}).get("reason", "opened")
    # the title is rendered from state: a line break in it is folded into the one-line subject
    subject = ("Reminder: " if reason == "reminder" else "New task: ") + mail.fold(task["title"])
    body = f"{task['title']}\n\nOpen the task: {link}\n".replace("\x00", "")
    mail.build(subject, body, recipients).send(fail_silently=False)


def due_intents(limit: int = 100) -> list[int]:
    rows = db.fetchall(
        "SELECT id FROM workflow_outbox WHERE status IN ('PENDING','DELIVERING') AND available_at <= now() "
        "AND (status = 'PENDING' OR lease_until < now()) ORDER BY id LIMIT %s",
        [limit],
    )
    return [int(r[0]) for r in rows]
