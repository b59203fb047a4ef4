"""Delivery of intents after commit: the claim, the delivery, the retry (at least once).

Called with an intent's id by a Celery task and by the sweep (``deliver``), or with an intent
this process claimed inline when it was recorded (``deliver_claimed``). A failure is retried
with a back-off and is DEAD after MAX_DELIVERY_ATTEMPTS (at once when every attempt would
repeat it). Statements: ``engine/sql/outbox_delivery.sql``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.urls import NoReverseMatch, reverse

from workflows import users
from workflows.engine import db, events, faults, mail, sql, wakeups, webhooks
from workflows.engine.outbox import digest
from workflows.engine.outbox.recording import lease_seconds, plain_name
from workflows.models import OutboxIntent, TaskStatus

log = logging.getLogger("workflows.engine")
SQL = sql.load("outbox_delivery")
MAX_DELIVERY_ATTEMPTS = 10


def _claim(intent_id: int) -> dict[str, Any] | None:
    return db.fetchdict(SQL.claim, [lease_seconds(), intent_id])


def deliver(intent_id: int) -> str:
    """Deliver one intent if it is due and unclaimed. Answers the resulting status."""
    with transaction.atomic():
        intent = _claim(intent_id)
    if intent is None:
        return "SKIPPED"
    return deliver_claimed(intent)


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
        db.execute(SQL.mark_many, [[i for i, _ in items], [t for _, t in items]], prepared=True)
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
    except digest.NotYet:
        digest.postpone(intent)  # its migration still has runs to apply: no attempt spent
        return "POSTPONED"
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
            SQL.failed,
            [
                OutboxIntent.Status.DEAD if dead else OutboxIntent.Status.PENDING,
                error,
                min(2 ** intent["attempts"], 300),
                intent_id,
                intent["token"],
            ],
        )
        return OutboxIntent.Status.DEAD if dead else "RETRY"
    if _marks.enabled and intent["kind"] != "COMPENSATION" and wakeups.delivers_inline():
        _marks.add(intent_id, intent["token"])
        return OutboxIntent.Status.DELIVERED
    asynchronous = "NULL" if connection.in_atomic_block else "set_config('synchronous_commit', 'off', true)"
    db.execute(SQL.mark_delivered.format(async_commit=asynchronous), [intent_id, intent["token"]], prepared=True)
    _release_next_compensation(intent)
    return OutboxIntent.Status.DELIVERED


def _release_next_compensation(intent: dict[str, Any]) -> None:
    if intent["kind"] != "COMPENSATION":
        return
    row = db.fetchone(SQL.next_compensation, [intent["run_id"]])
    if row and wakeups._intent_notifier is not None:
        wakeups._intent_notifier([int(row[0])])


def _perform(intent: dict[str, Any]) -> None:
    kind = intent["kind"]
    if kind in ("SERVICE", "COMPENSATION"):
        target = intent["target"]
        if plain_name(target):
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
    elif kind == "EVENT":
        events.deliver(intent)
    elif kind == "NOTIFY":
        _notify(intent)
    elif kind == "DIGEST":
        _digest(intent)
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

    # Standard Webhooks: the signature covers the message id (the intent's idempotency key, the
    # same on every retry), the attempt's timestamp and the body, so a receiver that checks the
    # timestamp's window (``events.verify``) refuses a captured call replayed later
    message_id = str(intent["idempotency_key"])
    timestamp = int(time.time())
    headers = {k: v for k, v in (intent["headers"] or {}).items()}
    headers.update(
        {
            "Content-Type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": events.sign(conf.webhook_signing_key(), message_id, timestamp, body),
        }
    )
    # a vetted public address (or an allowed network), no redirect followed, one deadline for
    # the whole attempt: see webhooks.py. The line logged says how long the attempt took and how
    # it ended (a status only when the whole answer arrived in time), never the target or body.
    started = time.monotonic()
    outcome = "no answer"
    try:
        status = webhooks.post(url, body, headers)
        outcome = f"status {status}"
    except webhooks.AttemptTimedOut:
        outcome = "timed out (the attempt's deadline)"
        raise
    except webhooks.UndeliverableTarget:
        outcome = "refused by the network policy"
        raise
    finally:
        log.info(
            "service call of intent %s (attempt %s): %s after %d ms",
            intent["id"],
            intent["attempts"],
            outcome,
            int((time.monotonic() - started) * 1000),
        )
    if status >= 300:
        raise RuntimeError("webhook answered an error status")


def _notify(intent: dict[str, Any]) -> None:
    task = db.fetchdict(SQL.notice_task, [intent["target"]])
    if task is None or task["status"] not in (TaskStatus.OPEN, TaskStatus.COMPLETING):
        return
    recipients = users.addresses(task["assignment_mode"], task["assignment_value"])
    # an address the mail backend would refuse (stored without the form's validation) is
    # skipped, so one bad account neither fails the notice nor keeps the others from it
    recipients = [r for r in recipients if mail.valid_address(r)]
    if not recipients:
        return
    link = task_link(task["id"])
    reason = (intent["payload"] or {}).get("reason", "opened")
    # the title is rendered from state: a line break in it is folded into the one-line subject
    subject = ("Reminder: " if reason == "reminder" else "New task: ") + mail.fold(task["title"])
    body = f"{task['title']}\n\nOpen the task: {link}\n".replace("\x00", "")
    mail.build(subject, body, recipients).send(fail_silently=False)


def _digest(intent: dict[str, Any]) -> None:
    """One message to an assignee whose approvals a migration reopened for them, once nothing
    of the migration is left to apply (``digest``)."""
    payload = intent["payload"] or {}
    if payload.get("migration") and digest.migration_open(int(payload["migration"])):
        raise digest.NotYet
    recipients = [
        r for r in users.addresses(str(payload.get("mode", "")), str(payload.get("value", ""))) if mail.valid_address(r)
    ]
    if not recipients or not int(payload.get("count") or 0):
        return
    subject, body = digest.message(payload)
    mail.build(mail.fold(subject), body.replace("\x00", ""), recipients).send(fail_silently=False)


def inbox_link() -> str:
    """The inbox's address for a digest (``SITE_URL`` and the path of ``workflows:inbox``)."""
    site = str(getattr(settings, "SITE_URL", "")).rstrip("/")
    try:
        return site + reverse("workflows:inbox")
    except NoReverseMatch:
        return site + "/"


def task_link(task_id: Any) -> str:
    """The task page's address for a notice: ``SITE_URL`` and the path the host mounted the
    approvers' pages at (``workflows:task``); the bare site when the host mounted none."""
    site = str(getattr(settings, "SITE_URL", "")).rstrip("/")
    try:
        return site + reverse("workflows:task", args=[task_id])
    except NoReverseMatch:
        return site + "/"


def due_intents(limit: int = 100) -> list[int]:
    """Every due intent (claimable now), whether a message for it is queued or not."""
    rows = db.fetchall(SQL.due_intents, [limit])
    return [int(r[0]) for r in rows]


def intents_to_send(limit: int = 100) -> list[int]:
    """Due intents with no delivery message queued (``enqueued_until``), each leased to the
    message the caller sends after its transaction commits (the sweep): at most one queued
    message per intent; one lost is sent again once its lease (MESSAGE_LEASE_SECONDS) ends."""
    from workflows import conf

    lease = int(conf.get().EXECUTOR.MESSAGE_LEASE_SECONDS)
    rows = db.fetchall(SQL.intents_to_send, {"lease": lease, "limit": limit})
    return sorted(int(r[0]) for r in rows)
