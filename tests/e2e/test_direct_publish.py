"""Wake-ups written straight onto a Redis broker's list (``workflows.publish``): the envelope is
the one Celery itself writes, and a real worker runs what was published that way."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from kombu import Connection

from config.celery import app
from demo.models import PurchaseOrder
from tests.support.celery_tasks import create_purchase_order
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually
from workflows import publish, tasks

pytestmark = pytest.mark.services

# values that differ from one message to the next (ids, tags, the sending process)
PER_MESSAGE = {"id", "root_id", "origin", "correlation_id", "reply_to", "delivery_tag"}


def _comparable(message: dict) -> dict:
    body = json.loads(base64.b64decode(message["body"]))
    headers = {k: ("*" if k in PER_MESSAGE else v) for k, v in message["headers"].items()}
    properties = {k: ("*" if k in PER_MESSAGE else v) for k, v in message["properties"].items()}
    properties.pop("argsrepr", None)  # Celery copies these into the properties too; workers read the headers
    properties.pop("kwargsrepr", None)
    rest = {k: v for k, v in message.items() if k not in ("body", "headers", "properties")}
    return {"body": body, "headers": headers, "properties": properties, **rest}


def test_the_direct_envelope_is_the_one_celery_writes() -> None:
    run_id = str(uuid.uuid4())
    argsrepr = f"['{run_id}']"
    with Connection("memory://") as conn:  # kombu's virtual transport, as Redis's: the same envelope
        tasks.run_instance.apply_async(args=[run_id], argsrepr=argsrepr, kwargsrepr="{}", connection=conn)
        celerys = conn.default_channel._get(app.conf.task_default_queue)
    ours = json.loads(publish._envelope(tasks.run_instance, app.conf.task_default_queue, [run_id], argsrepr))

    assert _comparable(ours) == _comparable(celerys)
    assert json.loads(base64.b64decode(ours["body"]))[0] == [run_id]
    assert ours["headers"]["task"] == "workflows.run"


def test_the_direct_path_is_taken_only_for_a_plain_redis_broker() -> None:
    queue = publish._direct_queue(tasks.run_instance)
    if str(app.conf.broker_url).startswith("redis://"):
        assert queue == app.conf.task_default_queue
    else:
        assert queue is None  # the embedded broker, RabbitMQ...: apply_async


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_a_message_published_directly(
    celery_worker_process: CeleryProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    if publish._direct_queue(create_purchase_order) is None:
        pytest.skip("the broker is not a plain Redis broker: nothing is published directly")
    sent_by_celery: list[object] = []
    monkeypatch.setattr(create_purchase_order, "apply_async", lambda *a, **k: sent_by_celery.append(a))

    publish.publish(create_purchase_order, ["PO-DIRECT-1"], "['PO-DIRECT-1']")

    eventually(
        lambda: PurchaseOrder.objects.filter(number="PO-DIRECT-1").exists(),
        timeout=30,
        what="the worker to run the directly published message",
        details=celery_worker_process.logs,
    )
    assert sent_by_celery == []  # the message went straight onto the list, not through Celery
    assert PurchaseOrder.objects.filter(number="PO-DIRECT-1").count() == 1


DOCUMENT = """
definitionId: eager-on-redis
definitionVersion: 1
contract: {name: eager-on-redis.v1}
initialStep: done
steps:
  - {id: done, type: complete}
"""


@pytest.mark.django_db(transaction=True)
def test_a_run_advances_under_task_always_eager_on_a_redis_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #39: a host's test settings with ``CELERY_TASK_ALWAYS_EAGER`` and a Redis broker
    left every run PENDING: the wake-up went straight onto Redis's list, past Celery's eager
    mode, for a worker the tests never start. Eager mode takes Celery's path, which runs the
    task when the recording commits."""
    from workflows import definitions, operations
    from workflows.models import Run

    ref = definitions.load(scope="default", text=DOCUMENT, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")

    pushed: list[str] = []

    class Redis:  # what the direct path would have written, without a Redis server
        def lpush(self, queue: str, envelope: str) -> None:
            pushed.append(queue)

    monkeypatch.setattr(publish._direct, "redis", lambda app: Redis())
    monkeypatch.setattr(publish._direct, "checked", {})
    conf = app.conf
    saved = {
        key: conf[key] for key in ("broker_url", "broker_transport", "broker_transport_options", "task_always_eager")
    }
    conf.update(broker_url="redis://127.0.0.1:6379/0", broker_transport=None, broker_transport_options={})
    try:
        assert publish._direct_queue(tasks.run_instance) is not None  # the direct path applies
        conf.update(task_always_eager=True)
        recorded = operations.start(definition_id="eager-on-redis", payload={})
    finally:
        conf.update(saved)

    assert Run.objects.get(pk=recorded.run_id).status == "COMPLETED"
    assert pushed == []
