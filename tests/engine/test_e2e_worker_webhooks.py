"""Events out through a real Celery worker: the worker runs the segments that record the
events and then delivers their webhooks from the outbound queue, signed, once per event id.

The worker is one of this module's own, on a queue of its own that is also its outbound queue
(``WORKFLOWS_OUTBOUND_QUEUE``; production runs a separate worker there, see
tests/engine/test_e2e_outbound.py): it trusts the receiver's certificate (``SSL_CERT_FILE``) and
allows 127.0.0.1 (``WORKFLOWS_SERVICES_ALLOWED_NETWORKS``), which the suite's worker must not
(its tests refuse loopback). This process's wake-ups for these runs go to that queue.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.engine import documents
from tests.support import https_receiver
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import wakeups
from workflows.models import OutboxIntent, Task

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

QUEUE = f"switchyard-webhooks-test-{os.getpid()}"


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[https_receiver.HttpsReceiver]:
    live = https_receiver.start(tmp_path_factory.mktemp("receiver"))
    yield live
    live.stop()


@pytest.fixture(scope="module")
def webhook_worker(
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
    receiver: https_receiver.HttpsReceiver,
) -> Iterator[CeleryProcesses]:
    from django.db import connection

    env = {
        **os.environ,
        "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"],
        "SSL_CERT_FILE": str(receiver.cert),
        "WORKFLOWS_SERVICES_ALLOWED_NETWORKS": "127.0.0.1/32",
        "WORKFLOWS_OUTBOUND_QUEUE": QUEUE,
    }
    worker = CeleryProcesses(env, tmp_path_factory.mktemp("webhook-worker"), queue=QUEUE)
    try:
        worker.start_worker()
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def wake_ups_to_the_webhook_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def runs(items: list[tuple[str, Any]]) -> None:
        for run_id, _ in items:
            tasks.run_instance.apply_async(args=[run_id], queue=QUEUE)

    def intents(ids: list[int]) -> None:
        for intent_id in ids:
            tasks.deliver.apply_async(args=[intent_id], queue=QUEUE)

    monkeypatch.setattr(wakeups, "_notifier", runs)
    monkeypatch.setattr(wakeups, "_intent_notifier", intents)


def verified(secret: str, headers: dict[str, str], body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return expected in headers["webhook-signature"].split()


def test_a_run_s_events_reach_the_receiver_through_the_worker(
    webhook_worker: CeleryProcesses,
    wake_ups_to_the_webhook_worker: None,
    receiver: https_receiver.HttpsReceiver,
    deploy: Any,
) -> None:
    deploy(documents.APPROVAL)
    with https_receiver.allowed_networks("127.0.0.1/32"):
        _, secret = operations.webhook_create(url=receiver.url, events=["run.started", "task.created", "run.completed"])
    run_id = str(operations.start(definition_id="approval", payload={"number": "W-1", "total": 5000}).run_id)
    task = eventually(
        lambda: Task.objects.filter(run_id=run_id).first(),
        timeout=60,
        what="the task to open",
        details=webhook_worker.logs,
    )
    operations.complete_task(task_id=task.id, decision="approve", actor="alice")

    def mine() -> list[https_receiver.Received]:
        return [r for r in receiver.received() if json.loads(r.body)["data"]["run_id"] == run_id]

    eventually(lambda: len(mine()) >= 3, timeout=60, what="three events at the receiver", details=webhook_worker.logs)
    eventually(
        lambda: not OutboxIntent.objects.filter(run_id=run_id, kind="EVENT").exclude(status="DELIVERED").exists(),
        timeout=30,
        what="the deliveries to be marked",
        details=webhook_worker.logs,
    )
    got = mine()
    assert sorted(json.loads(r.body)["type"] for r in got) == ["run.completed", "run.started", "task.created"]
    assert len({r.headers["webhook-id"] for r in got}) == 3  # once per event id
    assert all(verified(secret, r.headers, r.body) for r in got)
