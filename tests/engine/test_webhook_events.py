"""Events out: each transition of a run or a task is one event, sent as a Django signal after
commit and delivered to every matching webhook subscription through the outbox, signed per
Standard Webhooks, exactly once per event id (a retry or a redelivery repeats the id)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.engine import documents
from tests.support import https_receiver
from workflows import operations, signals, tasks
from workflows.engine import outbox, webhooks
from workflows.exceptions import DeliveryInFlight, InvalidPayload, WebhookNotFound
from workflows.models import HistoryEntry, OutboxIntent, Run, Task, WebhookAttempt

pytestmark = pytest.mark.django_db(transaction=True)

ALL = list(signals.EVENT_TYPES)


@pytest.fixture
def allow_loopback() -> Iterator[None]:
    with https_receiver.allowed_networks("127.0.0.1/32"):
        yield


@pytest.fixture
def receiver(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[https_receiver.HttpsReceiver]:
    live = https_receiver.start(tmp_path)
    monkeypatch.setattr(webhooks, "_tls_context", lambda: ssl.create_default_context(cafile=str(live.cert)))
    yield live
    live.stop()


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's side of Standard Webhooks, written from the specification."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    sent = [s.split(",", 1)[1] for s in headers["webhook-signature"].split() if s.startswith("v1,")]
    return any(hmac.compare_digest(expected, s) for s in sent)


def deliver_pending() -> None:
    for intent_id in OutboxIntent.objects.filter(kind="EVENT", status="PENDING").values_list("id", flat=True):
        outbox.deliver(intent_id)


def bodies(receiver: https_receiver.HttpsReceiver) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in receiver.received()]


@pytest.fixture
def heard() -> Iterator[list[signals.Event]]:
    events: list[signals.Event] = []

    def listen(sender: Any, event: signals.Event, **kwargs: Any) -> None:
        events.append(event)

    signals.workflow_event.connect(listen)
    yield events
    signals.workflow_event.disconnect(listen)


def test_each_transition_reaches_the_receiver_once_signed(
    deploy: Callable[..., Any], drain: Callable[..., int], receiver: Any, allow_loopback: None, heard: list[Any]
) -> None:
    deploy(documents.APPROVAL)
    subscription, secret = operations.webhook_create(url=receiver.url, events=ALL)
    approved = operations.start(definition_id="approval", payload={"number": "N-1", "total": 5000}, business_key="B-1")
    rejected = operations.start(definition_id="approval", payload={"number": "N-2", "total": 5000})
    cancelled = operations.start(definition_id="approval", payload={"number": "N-3", "total": 5000})
    drain()
    for run, decision in ((approved, "approve"), (rejected, "reject")):
        operations.complete_task(task_id=Task.objects.get(run_id=run.run_id).id, decision=decision, actor="alice")
    operations.cancel(run_id=cancelled.run_id, reason="no longer needed")
    drain()
    deliver_pending()
    deliver_pending()  # a second pass delivers nothing again

    received = receiver.received()
    assert received and all(verify(secret, r.headers, r.body) for r in received)
    assert all(r.headers["webhook-id"] == json.loads(r.body)["id"] for r in received)
    ids = [r.headers["webhook-id"] for r in received]
    assert len(ids) == len(set(ids))  # exactly once per event id
    by_run: dict[str, list[str]] = {}
    for body in bodies(receiver):
        by_run.setdefault(body["data"]["run_id"], []).append(body["type"])
    assert sorted(by_run[str(approved.run_id)]) == sorted(
        ["run.started", "task.created", "task.completed", "run.completed"]
    )
    assert sorted(by_run[str(rejected.run_id)]) == sorted(
        ["run.started", "task.created", "task.completed", "run.failed"]
    )
    assert sorted(by_run[str(cancelled.run_id)]) == sorted(["run.started", "task.created", "run.cancelled"])

    completed = next(b for b in bodies(receiver) if b["type"] == "run.completed")
    assert completed["data"]["business_key"] == "B-1" and completed["data"]["definition_id"] == "approval"
    assert completed["data"]["definition_version"] == 1
    task_event = next(
        b for b in bodies(receiver) if b["type"] == "task.completed" and b["data"]["run_id"] == str(approved.run_id)
    )
    assert task_event["data"]["task_id"] == str(Task.objects.get(run_id=approved.run_id).id)
    assert "N-1" not in json.dumps(bodies(receiver))  # no state values
    # the signals heard the same events, after commit, once each
    assert sorted(e.id for e in heard) == sorted(ids)
    assert WebhookAttempt.objects.filter(subscription_id=subscription.id, status_code=200).count() == len(ids)


def test_the_event_id_is_the_history_entry_s(
    deploy: Callable[..., Any], drain: Callable[..., int], heard: list[Any]
) -> None:
    deploy(documents.APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "N-1", "total": 10}).run_id
    drain()
    from workflows.engine.events import event_id

    entries = HistoryEntry.objects.filter(run_id=run_id, type__in=["WORKFLOW_STARTED", "WORKFLOW_COMPLETED"])
    assert sorted(e.id for e in heard) == sorted(event_id(run_id, e.seq) for e in entries)
    assert [e.type for e in heard] == ["run.started", "run.completed"]


def test_a_rolled_back_transition_sends_nothing(deploy: Callable[..., Any], heard: list[Any]) -> None:
    from django.db import transaction

    deploy(documents.APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "N-1", "total": 5000}).run_id
    tasks.run_instance(str(run_id))
    before = len(heard)
    with pytest.raises(RuntimeError), transaction.atomic():
        operations.cancel(run_id=run_id, reason="changed my mind")
        raise RuntimeError("the caller's transaction fails")
    assert len(heard) == before and Run.objects.get(pk=run_id).status == "WAITING"


def test_a_subscription_hears_only_its_events_and_definition(
    deploy: Callable[..., Any], drain: Callable[..., int], receiver: Any, allow_loopback: None
) -> None:
    deploy(documents.APPROVAL)
    operations.webhook_create(url=receiver.url, events=["run.completed"], definition_id="approval")
    operations.webhook_create(url=receiver.url, events=["run.completed"], definition_id="other")
    operations.webhook_create(url=receiver.url, events=["run.started"], active=False)
    operations.start(definition_id="approval", payload={"number": "N-1", "total": 10})
    drain()
    deliver_pending()
    assert [b["type"] for b in bodies(receiver)] == ["run.completed"]


def test_a_failing_receiver_is_retried_and_redelivered_with_the_same_id(
    deploy: Callable[..., Any], drain: Callable[..., int], receiver: Any, allow_loopback: None
) -> None:
    deploy(documents.APPROVAL)
    operations.webhook_create(url=receiver.url, events=["run.completed"])
    run_id = operations.start(definition_id="approval", payload={"number": "N-1", "total": 10}).run_id
    receiver.answer(500)
    drain()
    intent = OutboxIntent.objects.get(run_id=run_id, kind="EVENT")
    assert outbox.deliver(intent.pk) == "RETRY"
    intent.refresh_from_db()
    assert intent.status == "PENDING" and intent.last_error.startswith("DELIVERY_FAILED")
    OutboxIntent.objects.filter(pk=intent.pk).update(available_at=intent.created_at)  # the back-off is over
    assert outbox.deliver(intent.pk) == "RETRY"
    receiver.answer(200)
    OutboxIntent.objects.filter(pk=intent.pk).update(available_at=intent.created_at)
    assert outbox.deliver(intent.pk) == "DELIVERED"
    operations.webhook_redeliver(delivery_id=intent.pk)  # a manual redelivery: one more attempt
    assert outbox.deliver(intent.pk) == "DELIVERED"

    attempts = list(WebhookAttempt.objects.filter(intent=intent).order_by("id").values_list("status_code", flat=True))
    assert attempts == [500, 500, 200, 200]
    ids = {r.headers["webhook-id"] for r in receiver.received()}
    assert len(receiver.received()) == 4 and len(ids) == 1


def test_a_private_address_is_refused_and_a_resolved_one_dies_value_free(
    deploy: Callable[..., Any], drain: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidPayload) as refused:
        operations.webhook_create(url="https://10.1.2.3/hook", events=ALL)
    assert [v.pointer for v in refused.value.violations] == ["/url"] and "10.1.2.3" not in str(refused.value.violations)
    deploy(documents.APPROVAL)
    # a host name that resolves to loopback passes the subscription, and its deliveries die
    operations.webhook_create(url="https://localhost:9/hook", events=["run.started"])
    run_id = operations.start(definition_id="approval", payload={"number": "N-1", "total": 10}).run_id
    drain()
    intent = OutboxIntent.objects.get(run_id=run_id, kind="EVENT")
    assert outbox.deliver(intent.pk) == "DEAD"
    intent.refresh_from_db()
    assert intent.last_error.startswith("DELIVERY_REFUSED:") and "localhost" not in intent.last_error
    attempt = WebhookAttempt.objects.get(intent=intent)
    assert attempt.status_code is None and "127.0.0.1" not in attempt.error and "non-public" in attempt.error


def test_a_rotated_secret_signs_beside_the_previous_one(
    deploy: Callable[..., Any], drain: Callable[..., int], receiver: Any, allow_loopback: None
) -> None:
    deploy(documents.APPROVAL)
    subscription, old = operations.webhook_create(url=receiver.url, events=["run.started"])
    _, new = operations.webhook_rotate_secret(webhook_id=subscription.id)
    assert new != old and new.startswith("whsec_")
    operations.start(definition_id="approval", payload={"number": "N-1", "total": 10})
    drain()
    deliver_pending()
    (request,) = receiver.received()
    assert verify(new, request.headers, request.body) and verify(old, request.headers, request.body)
    assert len(request.headers["webhook-signature"].split()) == 2


def test_redelivery_refusals(deploy: Callable[..., Any], drain: Callable[..., int]) -> None:
    with pytest.raises(WebhookNotFound):
        operations.webhook_redeliver(delivery_id=123456789)
    deploy(documents.APPROVAL)
    operations.webhook_create(url="https://hooks.example.com/x", events=["run.started"])
    run_id = operations.start(definition_id="approval", payload={"number": "N-1", "total": 10}).run_id
    drain()
    intent = OutboxIntent.objects.get(run_id=run_id, kind="EVENT")
    OutboxIntent.objects.filter(pk=intent.pk).update(
        status="DELIVERING", lease_until=Run.objects.get(pk=run_id).created_at.replace(year=2999)
    )
    with pytest.raises(DeliveryInFlight):
        operations.webhook_redeliver(delivery_id=intent.pk)


TIMED = """
definitionId: events-timed
definitionVersion: {v}
contract: {{name: events-timed.v1, signals: {{}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review"
    assignment: {{mode: group, value: approvers}}
    due: {{after: PT1H, next: late}}
    decisions:
      - {{name: approve, next: done}}
  - id: late
    type: human-task
    title: "Late"
    assignment: {{mode: group, value: approvers}}
    decisions:
      - {{name: approve, next: done}}
  - {{id: done, type: complete}}
"""


def test_an_expired_task_and_a_migrated_run_are_events(
    deploy: Callable[..., Any], drain: Callable[..., int], heard: list[Any]
) -> None:
    from workflows.engine import db

    deploy(TIMED.format(v=1))
    deploy(TIMED.format(v=2), activate=False)
    expiring = operations.start(definition_id="events-timed", payload={}).run_id
    moving = operations.start(definition_id="events-timed", payload={}).run_id
    drain()
    db.execute(
        "UPDATE workflow_commands SET fire_at = now() - interval '1 minute', order_at = now() - interval "
        "'1 minute', available_at = now() - interval '1 minute' WHERE run_id = %s AND timer_kind = 'DUE'",
        [expiring],
    )
    db.execute("UPDATE workflow_timers SET fire_at = now() - interval '1 minute' WHERE run_id = %s", [expiring])
    operations.migrate(run_id=moving, target_version=2)
    drain()

    expired = [e for e in heard if e.type == "task.expired"]
    assert [(e.run_id, e.task_id) for e in expired] == [
        (str(expiring), str(Task.objects.get(run_id=expiring, step="review").id))
    ]
    (migrated,) = [e for e in heard if e.type == "run.migrated"]
    assert migrated.run_id == str(moving) and migrated.definition_version == 2


def test_events_reach_only_subscriptions_whose_owner_may_view_runs(
    deploy: Callable[..., Any], drain: Callable[..., int], receiver: Any, allow_loopback: None
) -> None:
    """Issue #40: a webhook subscriber without run permissions received every run's metadata."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    model = get_user_model()
    manager = model.objects.create_user("hooks-only", password="x")
    manager.user_permissions.add(Permission.objects.get(codename="change_webhooksubscription"))
    reader = model.objects.create_user("hooks-and-runs", password="x")
    reader.user_permissions.add(
        Permission.objects.get(codename="change_webhooksubscription"), Permission.objects.get(codename="view_run")
    )
    deploy(documents.APPROVAL)
    blind, _ = operations.webhook_create(url=receiver.url + "/blind", events=["run.started"], owner=manager)
    seeing, _ = operations.webhook_create(url=receiver.url + "/seeing", events=["run.started"], owner=reader)
    operations.start(definition_id="approval", payload={"number": "N-9", "total": 5000})
    drain()
    deliver_pending()

    assert [r.path for r in receiver.received()] == ["/hook/seeing"]
    refused = OutboxIntent.objects.get(kind="EVENT", target=str(blind.id))
    assert refused.status == "DEAD"
    assert refused.last_error == "DELIVERY_REFUSED: the webhook subscription's owner may not view runs"
    assert OutboxIntent.objects.get(kind="EVENT", target=str(seeing.id)).status == "DELIVERED"
