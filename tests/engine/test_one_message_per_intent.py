"""At most one queued delivery message per outbox intent (issue #45): the sweep leases the
message it sends (``enqueued_until``) and sends no other while that lease runs, however many
sweeps pass; a message lost (its lease ended with the intent still due) is sent again once.

Observed on the suite's broker: the length of the outbound queue (deliveries go there, never to
the executor's queue) with the default queue's, with no worker consuming them (the tests that
start one run after this one)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.engine.documents import APPROVAL
from workflows import operations, tasks
from workflows.models import OutboxIntent

pytestmark = pytest.mark.django_db(transaction=True)

WEBHOOK_URL = "https://hooks.invalid/switchyard"


def queued() -> int:
    """Messages waiting in the executor's queue and in the outbound queue."""
    from kombu.exceptions import ChannelError

    app = tasks.run_instance.app
    total = 0
    for name in (app.conf.task_default_queue, tasks.outbound_queue()):
        with app.connection_or_acquire() as conn:
            try:
                total += int(conn.default_channel.queue_declare(queue=name, passive=True).message_count)
            except ChannelError:  # not declared yet: nothing was ever sent to it
                pass
    return total


def test_the_sweep_queues_at_most_one_delivery_message_per_intent(deploy: Any, drain: Any) -> None:
    deploy(APPROVAL)
    operations.webhook_create(url=WEBHOOK_URL, events=["run.started"])
    runs = [
        operations.start(definition_id="approval", payload={"number": f"Q-{i}", "total": 5000}).run_id for i in range(6)
    ]
    drain()  # the starts ran here: six run.started deliveries, each sent its message after commit
    intents = OutboxIntent.objects.filter(run_id__in=runs, kind="EVENT", status="PENDING")
    assert intents.count() == 6

    before = queued()
    for _sweep in range(4):
        tasks.sweep.run()
    assert queued() == before  # the messages sent after commit are still presumed queued: none added

    # those messages were lost: their lease ends with the intents still due, and the sweep
    # sends each one again, once, however many sweeps follow
    intents.update(created_at=timezone.now() - timedelta(minutes=5))
    for _sweep in range(4):
        tasks.sweep.run()
    assert queued() == before + 6
    assert intents.filter(enqueued_until__gt=timezone.now()).count() == 6

    # a claim consumes the message; a failed attempt that is due again gets one more
    intent = intents.order_by("id").first()
    assert intent is not None
    from workflows.engine import outbox

    assert outbox.deliver(intent.pk) == "DEAD"  # .invalid never resolves: dead at its first attempt
    tasks.sweep.run()
    assert queued() == before + 6  # a dead intent is not due: nothing sent
