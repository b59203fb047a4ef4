"""Dispatching captures: claim with a lease, record the starts, commit them with the status.

One dispatch (``capture.dispatch`` Celery task, or :func:`dispatch` in-process):

1. **Claim** (one statement): PENDING → DISPATCHING with a fresh claim token and a lease on
   the database clock (``WORKFLOWS["CAPTURE"]["LEASE_SECONDS"]``). A second delivery of the
   same message finds nothing PENDING and does nothing.
2. **Renew** the lease every third of its length from a background thread while the
   dispatch runs, so a slow dispatch keeps its claim and a dead one loses it.
3. **Dispatch** in one transaction: the triggers eligible *now* for the model and event
   (``triggers.for_event``) are evaluated against the snapshot; each match records a start
   (``workflows.operations.start``) with an idempotency key derived from the capture and the
   definition; a deletion tears down every run about the record (``operations.cancel``,
   reason "record deleted"); dispatch effects run last, each after its committed marker.
   The captured user is restored as the actor (an inactive or deleted user: no attribution).
4. **Commit, fenced**: the DISPATCHED status is written by ``UPDATE … WHERE claim_token =
   token AND status = 'DISPATCHING'`` in the same transaction as the starts; no row means
   the claim was lost (the lease expired and someone else took over) and everything rolls
   back: an obsolete worker commits nothing.
5. **A caught failure** rolls the transaction back and settles the capture (fenced again):
   OUTCOME_UNKNOWN when an effect marker of this claim was committed, else PENDING again
   with a backoff for retryable errors (lock timeouts, database trouble) while attempts
   remain, else FAILED. The error text is value-free.

The beat sweep (:func:`recover_expired`, :func:`stale_pending`) recovers what a dead worker
left: an expired unmarked claim goes back to PENDING (and is sent again), a marked one becomes
OUTCOME_UNKNOWN and waits for an administrator (``reconcile.py``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction

from capture import actor, effects, signals, triggers
from capture.effects import CapturedEvent, ClaimLost
from capture.models import Capture, CaptureStatus
from workflows import conf, operations
from workflows.exceptions import ExpressionFailed, InstanceNotFound, SignalRejected, WorkflowError

log = logging.getLogger("capture")

RECORD_DELETED = "record deleted"
MAX_ATTEMPTS = 5  # retryable failures before a capture is FAILED
RETRY_BASE_SECONDS = 2
RETRY_MAX_SECONDS = 300
SWEEP_BATCH = 200
RETENTION_BATCH = 1000
ERROR_LIMIT = 1000
NODE_ID = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def dispatcher_id() -> str:
    return f"{NODE_ID}-{os.getpid()}"[:255]


class Obsolete(Exception):
    """The claim was lost while dispatching: nothing of this attempt may commit."""


class TriggerFailed(WorkflowError):
    """A trigger could not be evaluated or its start was refused (wraps the workflow error)."""

    def __init__(self, definition_id: str, version: int, error: WorkflowError):
        super().__init__(f"trigger of {definition_id} v{version}: {error.code}: {error.message}", code=error.code)
        self.retryable = error.retryable


# --- claim and lease ---------------------------------------------------------------------------

# -- name: claim_capture
# PENDING and available -> DISPATCHING with a token and a lease on the database clock.
# (clock_timestamp: available_at defaults to the inserting statement's time, which may be later
# than the start of a transaction that claims in it.)
CLAIM = (
    "UPDATE capture_captures SET status = 'DISPATCHING', claim_token = %s, claimed_by = %s, "
    "attempts = attempts + 1, lease_until = now() + make_interval(secs => %s), updated_at = now(), "
    "enqueued_until = NULL "
    "WHERE id = %s AND status = 'PENDING' AND available_at <= clock_timestamp() RETURNING id"
)
# -- name: renew_lease
RENEW = (
    "UPDATE capture_captures SET lease_until = now() + make_interval(secs => %s), updated_at = now() "
    "WHERE id = %s AND claim_token = %s AND status = 'DISPATCHING'"
)
# -- name: complete_dispatch
# The fence: only the holder of the claim completes it, in the transaction of its starts.
COMPLETE = (
    "UPDATE capture_captures c SET status = 'DISPATCHED', dispatched_at = now(), updated_at = now(), "
    "runs_started = %s, runs_cancelled = %s, last_error = '', claim_token = NULL, lease_until = NULL, "
    "effect_started_at = (SELECT min(m.started_at) FROM capture_effect_markers m "
    "WHERE m.capture_id = c.id AND m.token = %s) "
    "WHERE c.id = %s AND c.claim_token = %s AND c.status = 'DISPATCHING' RETURNING c.id"
)
# -- name: settle_failure
# After a rolled-back attempt: marked -> OUTCOME_UNKNOWN; retryable with attempts left -> PENDING
# (available after a backoff); otherwise FAILED. Fenced by the token like the completion.
SETTLE = (
    "UPDATE capture_captures c SET "
    "status = CASE WHEN m.started_at IS NOT NULL THEN 'OUTCOME_UNKNOWN' "
    "  WHEN %(retryable)s AND c.attempts < %(max)s THEN 'PENDING' ELSE 'FAILED' END, "
    "available_at = CASE WHEN m.started_at IS NULL AND %(retryable)s AND c.attempts < %(max)s "
    "  THEN now() + make_interval(secs => LEAST(%(base)s * power(2, c.attempts - 1), %(cap)s)) "
    "  ELSE c.available_at END, "
    "effect_started_at = m.started_at, last_error = %(error)s, claim_token = NULL, lease_until = NULL, "
    "updated_at = now() "
    "FROM (SELECT min(started_at) AS started_at FROM capture_effect_markers "
    "      WHERE capture_id = %(id)s AND token = %(token)s) m "
    "WHERE c.id = %(id)s AND c.claim_token = %(token)s AND c.status = 'DISPATCHING' "
    "RETURNING c.status, extract(epoch FROM c.available_at - now())"
)
# -- name: recover_expired
# Expired claims (their worker stopped): unmarked -> PENDING, marked -> OUTCOME_UNKNOWN.
RECOVER = (
    "WITH expired AS (SELECT id, claim_token FROM capture_captures "
    "  WHERE status = 'DISPATCHING' AND lease_until < now() ORDER BY lease_until LIMIT %s FOR UPDATE SKIP LOCKED), "
    "marked AS (SELECT e.id, (SELECT min(m.started_at) FROM capture_effect_markers m "
    "  WHERE m.capture_id = e.id AND m.token = e.claim_token) AS started_at FROM expired e) "
    "UPDATE capture_captures c SET "
    "status = CASE WHEN marked.started_at IS NULL THEN 'PENDING' ELSE 'OUTCOME_UNKNOWN' END, "
    "effect_started_at = marked.started_at, "
    "last_error = CASE WHEN marked.started_at IS NULL "
    "  THEN 'LEASE_EXPIRED: the worker holding the claim stopped; dispatched again' "
    "  ELSE 'OUTCOME_UNKNOWN: the worker stopped after an effect started; check the effect, then reconcile' END, "
    "available_at = now(), claim_token = NULL, lease_until = NULL, claimed_by = '', updated_at = now() "
    "FROM marked WHERE c.id = marked.id RETURNING c.id, c.status"
)
# -- name: stale_pending
# PENDING captures whose message should long have arrived: none is presumed queued any more
# (the one sent when it became available: until available_at + the lease; one the sweep sent:
# until enqueued_until). Each is leased to the message the sweep sends now (at most one queued
# per capture, however long the queue).
STALE = (
    "UPDATE capture_captures SET enqueued_until = now() + make_interval(secs => %(lease)s), updated_at = now() "
    "WHERE id IN ("
    "  SELECT id FROM capture_captures WHERE status = 'PENDING' AND available_at <= now() "
    "  AND coalesce(enqueued_until, available_at + make_interval(secs => %(lease)s)) <= now() "
    "  ORDER BY available_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) RETURNING id"
)
# -- name: purge_dispatched
RETENTION = (
    "WITH old AS (SELECT id FROM capture_captures WHERE status = 'DISPATCHED' "
    "  AND dispatched_at < now() - make_interval(days => %s) ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED), "
    "markers AS (DELETE FROM capture_effect_markers WHERE capture_id IN (SELECT id FROM old)) "
    "DELETE FROM capture_captures WHERE id IN (SELECT id FROM old)"
)


def _lease_seconds() -> int:
    return int(conf.get().CAPTURE.LEASE_SECONDS)


def claim(capture_id: int) -> uuid.UUID | None:
    """PENDING → DISPATCHING; the claim token, or None when there is nothing to claim."""
    token = uuid.uuid4()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(CLAIM, [token, dispatcher_id(), _lease_seconds(), capture_id])
        return token if cursor.fetchone() is not None else None


class LeaseRenewal:
    """Renews a claim's lease every third of its length until the dispatch ends.

    Runs on its own thread and therefore its own database connection; the dispatch
    transaction holds no lock on the capture row until its final fenced update, so renewals
    never wait on it. A renewal that finds the claim gone stops (the fence decides).
    """

    def __init__(self, capture_id: int, token: uuid.UUID, lease_seconds: int):
        self.capture_id = capture_id
        self.token = token
        self.lease_seconds = lease_seconds
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"capture-lease-{capture_id}", daemon=True)

    def __enter__(self) -> LeaseRenewal:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        interval = self.lease_seconds / 3
        try:
            while not self._stop.wait(interval):
                try:
                    with connection.cursor() as cursor:
                        cursor.execute(RENEW, [self.lease_seconds, self.capture_id, self.token])
                        renewed = cursor.rowcount
                except DatabaseError:
                    log.warning("capture %s: lease renewal failed", self.capture_id, exc_info=True)
                    continue
                if not renewed:
                    self.lost = True
                    log.warning("capture %s: the claim was lost; this dispatch will commit nothing", self.capture_id)
                    return
        finally:
            connection.close()


# --- dispatch ----------------------------------------------------------------------------------


def dispatch(capture_id: int) -> str:
    """Claim and dispatch one capture. Answers DISPATCHED, SKIPPED (nothing to claim),
    OBSOLETE (the claim was lost) or the status a caught failure settled it in."""
    token = claim(capture_id)
    if token is None:
        return "SKIPPED"
    with LeaseRenewal(capture_id, token, _lease_seconds()):
        try:
            signals.capture_claimed.send(sender=Capture, capture_id=capture_id, token=token)
            _dispatch_claimed(capture_id, token)
        except (Obsolete, ClaimLost):
            log.warning("capture %s: the claim was lost; the attempt committed nothing", capture_id)
            return "OBSOLETE"
        except Exception as error:  # noqa: BLE001 - every failure settles the capture
            status = _settle_failure(capture_id, token, error)
            signals.capture_settled.send(sender=Capture, capture_id=capture_id, status=status)
            return status
    signals.capture_settled.send(sender=Capture, capture_id=capture_id, status=CaptureStatus.DISPATCHED)
    return CaptureStatus.DISPATCHED


def restore_user(actor_pk: str) -> Any:
    """The captured user while still active; None (no attribution) when gone or inactive."""
    if not actor_pk:
        return None
    model = get_user_model()
    try:
        user = model._default_manager.filter(pk=actor_pk).first()
    except (ValueError, TypeError):
        return None
    if user is None or not getattr(user, "is_active", True):
        return None
    return user


def idempotency_key(capture_id: int, definition_id: str) -> str:
    """The start's key: a repeated dispatch of a capture records nothing new for a definition."""
    key = f"capture:{capture_id}:{definition_id}"
    if len(key) <= 255:
        return key
    import hashlib

    return f"capture:{capture_id}:{hashlib.sha256(definition_id.encode()).hexdigest()}"


def _evaluate(spec: triggers.TriggerSpec, variables: dict[str, Any]) -> tuple[bool, Any, str]:
    """(matches, payload, business key) of one trigger for the captured event."""
    if spec.when is not None:
        matched = spec.when.evaluate(variables)
        if not isinstance(matched, bool):
            raise ExpressionFailed("the trigger's when must give true or false")
        if not matched:
            return False, None, ""
    payload = spec.payload.evaluate(variables) if spec.payload is not None else variables["record"]
    key = spec.business_key.evaluate(variables) if spec.business_key is not None else None
    return True, payload, "" if key is None else str(key)


def _dispatch_claimed(capture_id: int, token: uuid.UUID) -> None:
    from workflows import operations, queries

    with transaction.atomic():
        capture = Capture.objects.filter(pk=capture_id, claim_token=token, status=CaptureStatus.DISPATCHING).first()
        if capture is None:
            raise Obsolete
        if capture.snapshot is None:
            raise WorkflowError("the capture has no snapshot to dispatch", code="SNAPSHOT_MISSING")
        user = restore_user(capture.actor_pk)
        variables = {
            "record": capture.snapshot,
            "previous": capture.previous,
            "changed": list(capture.changed or []),
            "event": capture.event,
        }
        started: list[str] = []
        cancelled: list[str] = []
        with actor.acting_as(user):
            for spec in triggers.for_event(capture.model, capture.event):
                try:
                    matched, payload, business_key = _evaluate(spec, variables)
                    if not matched:
                        continue
                    recorded = operations.start(
                        definition_id=spec.definition_id,
                        version=spec.version,
                        scope=spec.scope,
                        payload=payload,
                        business_key=business_key,
                        idempotency_key=idempotency_key(capture.pk, spec.definition_id),
                        actor=user,
                        context={"capture": capture.pk},
                    )
                except WorkflowError as error:
                    raise TriggerFailed(spec.definition_id, spec.version, error) from error
                started.append(recorded.run_id)
            if capture.event == "deleted":
                labels = [capture.model, capture.model.lower()]
                for run_id in queries.live_runs_about(subject_types=labels, subject_id=capture.object_pk):
                    try:
                        operations.cancel(run_id=run_id, reason=RECORD_DELETED, actor=user)
                    except (SignalRejected, InstanceNotFound):
                        continue  # it ended meanwhile: nothing left to tear down
                    cancelled.append(run_id)
            event = CapturedEvent(
                capture_id=capture.pk,
                model=capture.model,
                object_pk=capture.object_pk,
                event=capture.event,
                record=capture.snapshot,
                previous=capture.previous,
                changed=list(capture.changed or []),
                actor=user,
            )
            for effect in effects.for_event(capture.model, capture.event):
                if effect.when is not None and not effect.when(event):
                    continue
                effects.mark_started(capture_id=capture.pk, token=token, effect=effect.name)
                effect.func(event)
        with connection.cursor() as cursor:
            cursor.execute(COMPLETE, [_json(started), _json(cancelled), token, capture.pk, token])
            if cursor.fetchone() is None:
                raise Obsolete


def _json(value: Any) -> str:
    from workflows import jsonvalues

    return jsonvalues.dumps(value)


def describe(error: BaseException) -> str:
    """A value-free account of a failure for ``last_error`` (never exception text)."""
    if isinstance(error, WorkflowError):
        text = error.message if isinstance(error, TriggerFailed) else f"{error.code}: {error.message}"
    elif isinstance(error, DatabaseError):
        text = f"PERSISTENCE: database failure (sqlstate {_sqlstate(error) or 'unknown'})"
    else:
        text = "ERROR: the dispatch failed"
    return text[:ERROR_LIMIT]


def _sqlstate(error: BaseException) -> str | None:
    cause: BaseException | None = error
    while cause is not None:
        state = getattr(cause, "sqlstate", None)
        if state:
            return str(state)
        cause = cause.__cause__
    return None


def _retryable(error: BaseException) -> bool:
    # a database failure is retried only when transient (connection loss, lock timeout,
    # deadlock, serialization): any other would fail the same way again
    if isinstance(error, DatabaseError):
        return operations.is_transient(error)
    return bool(getattr(error, "retryable", False))


def _settle_failure(capture_id: int, token: uuid.UUID, error: BaseException) -> str:
    log.warning("capture %s: dispatch failed (%s)", capture_id, type(error).__name__, exc_info=error)
    params: dict[str, Any] = {
        "retryable": _retryable(error),
        "max": MAX_ATTEMPTS,
        "base": RETRY_BASE_SECONDS,
        "cap": RETRY_MAX_SECONDS,
        "error": describe(error),
        "id": capture_id,
        "token": token,
    }
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(SETTLE, params)
            row = cursor.fetchone()
    except DatabaseError:
        # the database is away: the lease will expire and the sweep settles the capture
        log.warning("capture %s: the failure could not be recorded; the sweep will", capture_id, exc_info=True)
        return CaptureStatus.DISPATCHING
    if row is None:
        return "OBSOLETE"
    status, delay = row[0], float(row[1] or 0)
    if status == CaptureStatus.PENDING:
        from capture import recording

        transaction.on_commit(lambda: recording.send(capture_id, countdown=max(delay, 0.0) + 0.1))
    return str(status)


# --- sweep and retention -----------------------------------------------------------------------


def recover_expired() -> list[tuple[int, str]]:
    """Settle claims whose lease expired: (capture id, new status) each; PENDING ones need a send."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(RECOVER, [SWEEP_BATCH])
        rows = [(int(r[0]), str(r[1])) for r in cursor.fetchall()]
    for capture_id, status in rows:
        log.warning("capture %s: lease expired, now %s", capture_id, status)
    return rows


def stale_pending() -> list[int]:
    """PENDING captures whose dispatch message seems lost (its lease, EXECUTOR.MESSAGE_LEASE_SECONDS,
    ended): each is leased to the message the caller sends again."""
    lease = int(conf.get().EXECUTOR.MESSAGE_LEASE_SECONDS)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(STALE, {"lease": lease, "limit": SWEEP_BATCH})
        return sorted(int(r[0]) for r in cursor.fetchall())


def purge_dispatched(days: int | None = None) -> int:
    """Delete DISPATCHED captures older than RETAIN_DAYS (failed, unknown and resolved stay)."""
    keep = int(days if days is not None else conf.get().CAPTURE.RETAIN_DAYS)
    total = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(RETENTION, [keep, RETENTION_BATCH])
            deleted = int(cursor.rowcount)
        total += deleted
        if deleted < RETENTION_BATCH:
            return total
