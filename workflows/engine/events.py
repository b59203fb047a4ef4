"""Events out: the transitions of runs and tasks, as Django signals and webhook deliveries.

Every transition an integrator may want to hear about is already written once, as a history
entry (WORKFLOW_STARTED, TASK_CREATED, ...), and every history entry leaves through
``HistoryBuffer.flush_rows``. So that is where events are made (``recorded``), whichever
node, teardown, timer or migration wrote the entry, and in the transaction that writes it:

- one outbox intent (kind ``EVENT``) per event and matching webhook subscription, written with
  the segment's next statement (no round trip of its own in a segment) and delivered after
  commit through the outbox's claim, retries and dead state (``deliver`` signs it, Standard
  Webhooks);
- the Django signals of ``workflows.signals``, sent on commit (never for a rolled-back
  transition).

An event's id is derived from the run and the entry's ``seq``, which are unique and never
reused once committed: a receiver deduplicates on it (``webhook-id``), also across retries and
manual redeliveries. Statements: ``engine/sql/events.sql``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import socket
import ssl
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from workflows import signals
from workflows.engine import db, pipeline, sql, wakeups, webhooks
from workflows.exceptions import DeliveryInFlight, InvalidPayload, Violation, WebhookNotFound
from workflows.models import OutboxIntent

if TYPE_CHECKING:
    from workflows.engine.history import HistoryBuffer

log = logging.getLogger("workflows.engine")
SQL = sql.load("events")

# the history entry that records each transition -> its event type
EVENT_OF_ENTRY: dict[str, str] = {
    "WORKFLOW_STARTED": signals.RUN_STARTED,
    "WORKFLOW_COMPLETED": signals.RUN_COMPLETED,
    "WORKFLOW_FAILED": signals.RUN_FAILED,
    "WORKFLOW_CANCELLED": signals.RUN_CANCELLED,
    "WORKFLOW_MIGRATED": signals.RUN_MIGRATED,
    "TASK_CREATED": signals.TASK_CREATED,
    "TASK_COMPLETED": signals.TASK_COMPLETED,
    "TASK_EXPIRED": signals.TASK_EXPIRED,
}
_EVENT_IDS = uuid.UUID("5d1c3a52-8f0e-4f57-9a43-2b7d0c6f1e90")  # the uuid5 namespace of event ids
SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def event_id(run_id: Any, seq: int) -> str:
    """The stable id of the event of the history entry at ``seq`` of run ``run_id``."""
    return "evt_" + uuid.uuid5(_EVENT_IDS, f"{run_id}:{seq}").hex


# --- recording --------------------------------------------------------------------------------


def recorded(buffer: HistoryBuffer, rows: list[dict[str, Any]]) -> None:
    """The events among a flush's history rows: their intents go with the transaction's next
    statement, their signals out on commit."""
    found: list[signals.Event] = []
    commands: dict[str, int | None] = {}
    occurred_at = timezone.now()
    for row in rows:
        kind = EVENT_OF_ENTRY.get(row["type"])
        if kind is None:
            continue
        given = row.get("payload")
        payload: dict[str, Any] = given if isinstance(given, dict) else {}
        outcome = ""
        if kind == signals.RUN_FAILED:
            outcome = str(row.get("outcome") or "")
        elif kind == signals.TASK_COMPLETED:
            outcome = str(payload.get("decision") or "")
        task = payload.get("task") if kind.startswith("task.") else None
        event = signals.Event(
            id=event_id(buffer.run_id, int(row["seq"])),
            type=kind,
            occurred_at=occurred_at,
            run_id=str(buffer.run_id),
            scope=buffer.scope,
            definition_id=buffer.definition_id,
            definition_version=buffer.version,
            business_key=buffer.business_key,
            step=str(row.get("step") or ""),
            task_id=str(task) if task else None,
            outcome=outcome,
        )
        found.append(event)
        commands[event.id] = row.get("command_id")
    if not found:
        return
    # never claimed inline by the executor's process: a delivery waits on a receiver, so it
    # goes to the outbound queue's worker (WORKFLOWS["OUTBOUND"]["QUEUE"])
    inline = False
    from workflows.engine.outbox.recording import lease_seconds

    items = [
        {"id": e.id, "type": e.type, "command_id": commands[e.id], "step": e.step, "body": e.as_dict()} for e in found
    ]
    params = [db.jsonb(items), buffer.run_id, inline, inline, inline, inline, lease_seconds(), buffer.definition_id]
    run_id = buffer.run_id
    pipeline.defer(SQL.record, params, lambda row: _intents_made(run_id, row, inline=inline))
    transaction.on_commit(lambda: _send(found))


def _intents_made(run_id: Any, row: tuple[Any, ...] | None, *, inline: bool) -> None:
    made = (row[0] if row else None) or []
    for intent in made:
        if not inline:
            wakeups.deliver(int(intent["id"]))
            continue
        wakeups.deliver_claimed(
            {
                "id": int(intent["id"]),
                "run_id": run_id,
                "command_id": intent["command_id"],
                "step": intent["step"],
                "kind": "EVENT",
                "target": intent["target"],
                "payload": intent["payload"],
                "headers": {},
                "idempotency_key": intent["key"],
                "attempts": 1,
                "token": uuid.UUID(intent["token"]),
            }
        )


def _send(found: list[signals.Event]) -> None:
    for event in found:
        signals.send(event)


# --- delivery ---------------------------------------------------------------------------------


def new_secret() -> str:
    """A subscription's signing secret, Standard Webhooks format (``whsec_`` + base64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` keyed with the secret's bytes."""
    return sign(base64.b64decode(secret.removeprefix(SECRET_PREFIX)), message_id, timestamp, body)


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """A Standard Webhooks signature (``v1,<base64>``) over id, timestamp and body."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


REPLAY_WINDOW_SECONDS = 300


def verify(
    key: bytes,
    headers: dict[str, str],
    body: bytes,
    *,
    tolerance_seconds: int = REPLAY_WINDOW_SECONDS,
    now: float | None = None,
) -> bool:
    """What a receiver checks (Standard Webhooks): one of ``webhook-signature``'s ``v1,``
    signatures is the HMAC of ``webhook-id``, ``webhook-timestamp`` and the body, and the
    timestamp is within ``tolerance_seconds`` of now, so a captured call replayed later, or with
    another id or timestamp, is refused. ``headers`` with lower-case names."""
    message_id = headers.get("webhook-id", "")
    try:
        timestamp = int(headers.get("webhook-timestamp", ""))
    except ValueError:
        return False
    current = time.time() if now is None else now
    if not message_id or abs(current - timestamp) > tolerance_seconds:
        return False
    expected = sign(key, message_id, timestamp, body)
    return any(hmac.compare_digest(expected, given) for given in headers.get("webhook-signature", "").split())


def _error_text(exc: BaseException) -> str:
    """What the delivery log says about a failure without an answer (value-free)."""
    if isinstance(exc, webhooks.UndeliverableTarget):
        return exc.reason[:255]
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return "the TLS handshake or the certificate check failed"
    if isinstance(exc, webhooks.AttemptTimedOut):
        return "the receiver did not answer within the attempt's deadline"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "the receiver did not answer in time"
    if isinstance(exc, OSError):
        return "the connection to the receiver failed"
    return "the delivery failed"


def deliver(intent: dict[str, Any]) -> None:
    """Deliver an EVENT intent to its subscription (signed, Standard Webhooks) and log the
    attempt. Raises on a failure (the outbox retries it, or marks it dead): an answer of 300 or
    above, no answer, or a refusal of the network policy or of a deleted or inactive
    subscription (dead at once: every attempt would repeat it)."""
    sub = db.fetchdict(SQL.subscription, [int(intent["target"])])
    if sub is None:
        raise webhooks.UndeliverableTarget("the webhook subscription was deleted")
    if not sub["active"]:
        raise webhooks.UndeliverableTarget("the webhook subscription is inactive")
    if sub["owner"] and not _owner_may_view_runs(str(sub["owner"])):
        # an event carries a run's metadata: only for an owner who may read runs (checked at
        # every attempt, so a permission withdrawn later stops the deliveries)
        raise webhooks.UndeliverableTarget("the webhook subscription's owner may not view runs")
    payload = intent["payload"] or {}
    message_id = str(payload.get("id", ""))
    body = db.dumps(payload).encode("utf-8")
    timestamp = int(time.time())
    signatures = [signature(s, message_id, timestamp, body) for s in (sub["secret"], sub["previous_secret"]) if s]
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Switchyard-Webhooks",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signatures),
    }
    started = time.monotonic()
    status: int | None = None
    error = ""
    try:
        # the service steps' vetted connection: a public address or an allowed network, no redirect
        # one deadline for the whole attempt (WORKFLOWS["OUTBOUND"]["ATTEMPT_SECONDS"]): a status
        # is logged only when the whole answer arrived in time
        status = webhooks.post(sub["url"], body, headers)
    except Exception as exc:
        error = _error_text(exc)
        raise
    finally:
        elapsed = int((time.monotonic() - started) * 1000)
        try:
            db.execute(SQL.attempt, [intent["id"], sub["id"], message_id, status, error, elapsed])
        except Exception:  # the log is for reading: a lost line never fails the delivery
            log.warning("writing the webhook attempt of intent %s failed", intent["id"], exc_info=True)
    if status >= 300:
        raise RuntimeError("the webhook receiver answered an error status")


def _owner_may_view_runs(owner: str) -> bool:
    from workflows import access, users

    user = users.named(users.active_users(), owner).first()
    return user is not None and access.has(user, access.Capability.VIEW_RUNS)


def redeliver(intent_id: int) -> None:
    """Deliver an event to its subscription again: the same payload and ``webhook-id``, a new
    attempt (and a fresh budget of retries), woken after the caller's transaction commits.
    Refuses WEBHOOK_NOT_FOUND (no such delivery) and DELIVERY_IN_FLIGHT (being attempted)."""
    row = db.fetchone(SQL.redeliver, [intent_id])
    if row is None:
        found = db.fetchone(SQL.delivery, [intent_id])
        if found is None or found[0] != "EVENT":
            raise WebhookNotFound("no webhook delivery has this id")
        raise DeliveryInFlight(f"the delivery is {OutboxIntent.Status.DELIVERING}; ask again once it settled")
    wakeups.deliver(intent_id)


# --- subscriptions ----------------------------------------------------------------------------

# A subscription's URL as this module admits it, also the API schema's ``pattern`` of ``url``
# (ECMA-262, Python and Rust regex alike): https, a host name of letters, digits and ``._~-`` or
# a bracketed IPv6 address (RFC 3986, IPv4 tail included), an optional port up to 65535, then
# printable ASCII. Whatever it admits, ``urlsplit`` reads as an https URL with a host and no
# credentials; what it refuses is refused here, so the schema and the API agree. A literal
# address is also held to the services' network policy (``webhooks.allowed``), a setting no
# schema states.
_H16 = r"[0-9A-Fa-f]{1,4}"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join(
    [
        rf"(?:{_H16}:){{6}}{_LS32}",
        rf"::(?:{_H16}:){{5}}{_LS32}",
        rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
)
_PORT = r"0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
URL_PATTERN = rf"^https://(?:[A-Za-z0-9._~-]+|\[(?:{_IPV6})\])(?::(?:{_PORT})?)?(?:[/?#][\x21-\x7e]*)?$"
URL_MAX_CHARS = 2048
_URL = re.compile(URL_PATTERN.removesuffix("$"))  # fullmatch: "$" would admit a final newline


def subscription_problems(*, url: str | None = None, events: Any = None) -> list[Violation]:
    """Why a subscription's URL or event list cannot be kept (value-free), for the fields
    given. The URL must be https with a host and no credentials, as ``URL_PATTERN`` spells it;
    a literal address must pass the service steps' network policy (a host name is resolved,
    and vetted, at delivery)."""
    problems: list[Violation] = []
    if url is not None:
        message = ""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises on a port that is not a number in range
        except ValueError:
            parts, message = None, "is not a valid URL"
        if parts is not None:
            if parts.scheme != "https" or not parts.hostname:
                message = "must be an https URL with a host"
            elif parts.username or parts.password:
                message = "must not carry credentials"
            elif len(url) > URL_MAX_CHARS:
                message = f"is longer than {URL_MAX_CHARS} characters"
            elif not _URL.fullmatch(url):
                message = "must name a host name or an IPv6 address in brackets, in printable ASCII"
            else:
                try:
                    address = ipaddress.ip_address(parts.hostname.split("%", 1)[0])
                except ValueError:
                    address = None
                if address is not None and not webhooks.allowed(address):
                    message = (
                        "is a loopback, private, link-local or other non-public address "
                        '(allow a network in WORKFLOWS["SERVICES"]["ALLOWED_NETWORKS"])'
                    )
        if message:
            problems.append(Violation(pointer="/url", type="url", message=message))
    if events is not None:
        if not isinstance(events, list | tuple) or not events:
            problems.append(Violation(pointer="/events", type="minItems", message="name at least one event type"))
        else:
            for i, name in enumerate(events):
                if name not in signals.EVENT_TYPES:
                    problems.append(Violation(pointer=f"/events/{i}", type="enum", message="is not an event type"))
    return problems


def check_subscription(*, url: str | None = None, events: Any = None) -> None:
    """Raise INVALID_PAYLOAD with every problem of ``subscription_problems``."""
    problems = subscription_problems(url=url, events=events)
    if problems:
        raise InvalidPayload("the webhook subscription is not valid", violations=problems)
