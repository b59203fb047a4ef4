"""Outbound work never holds the executor's workers (issue #40).

The story: webhook deliveries ran on the executor's own worker processes with a 10 s timeout per
socket read. A receiver sending one byte every 5 s held both workers for 90 s, every other run
stayed PENDING meanwhile, and both attempts were logged 200.

Now deliveries go to the outbound queue and its own worker, and one attempt has one deadline for
all of it. Here: ten receivers on 127.0.0.1 trickle one byte a second, for ever, at ten webhook
subscriptions and a service call, while probe runs go through the executor's worker. The workers
are this module's own (an executor's on a queue of its own and an outbound one), trusting the
receivers' certificate and allowing 127.0.0.1, which the suite's workers must not.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import https_receiver, trickling_receiver
from tests.support.processes import CeleryProcesses
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.engine import wakeups
from workflows.models import OutboxIntent, Run, WebhookAttempt

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EXECUTOR_QUEUE = f"switchyard-outbound-test-exec-{os.getpid()}"
OUTBOUND_QUEUE = f"switchyard-outbound-test-out-{os.getpid()}"
ATTEMPT_SECONDS = 3
RECEIVERS = 10
PROBES = 10

PROBE = """
definitionId: probe
definitionVersion: 1
contract: {name: probe.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: route
steps:
  - {id: route, type: decision, routes: [{when: "true", to: done}], default: done}
  - {id: done, type: complete}
"""

SLOW = """
definitionId: slow-hook
definitionVersion: 1
contract: {{name: slow-hook.v1, signals: {{}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: call
steps:
  - {{id: call, type: service, target: "{target}", next: done}}
  - {{id: done, type: complete}}
"""


@pytest.fixture(scope="module")
def receivers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[trickling_receiver.TricklingReceiver]]:
    cert, key = https_receiver.make_certificate(tmp_path_factory.mktemp("trickle"))
    live = [trickling_receiver.TricklingReceiver(cert, key, interval=1.0).start() for _ in range(RECEIVERS)]
    yield live
    for receiver in live:
        receiver.stop()


@pytest.fixture(scope="module")
def workers(
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
    receivers: list[trickling_receiver.TricklingReceiver],
) -> Iterator[CeleryProcesses]:
    from django.db import connection

    env = {
        **os.environ,
        "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"],
        "SSL_CERT_FILE": str(receivers[0].cert),
        "WORKFLOWS_SERVICES_ALLOWED_NETWORKS": "127.0.0.1/32",
        "WORKFLOWS_OUTBOUND_QUEUE": OUTBOUND_QUEUE,
        "WORKFLOWS_OUTBOUND_ATTEMPT_SECONDS": str(ATTEMPT_SECONDS),
    }
    processes = CeleryProcesses(env, tmp_path_factory.mktemp("outbound"), queue=EXECUTOR_QUEUE, outbound=True)
    try:
        processes.start_worker()
        yield processes
    finally:
        processes.stop()


@pytest.fixture
def wake_ups_to_these_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    def runs(items: list[tuple[str, Any]]) -> None:
        for run_id, _ in items:
            tasks.run_instance.apply_async(args=[run_id], queue=EXECUTOR_QUEUE)

    def intents(ids: list[int]) -> None:
        for intent_id in ids:
            tasks.deliver.apply_async(args=[intent_id], queue=OUTBOUND_QUEUE)

    monkeypatch.setattr(wakeups, "_notifier", runs)
    monkeypatch.setattr(wakeups, "_intent_notifier", intents)


def test_trickling_receivers_never_hold_the_executor_and_time_out_whole(
    workers: CeleryProcesses,
    wake_ups_to_these_workers: None,
    receivers: list[trickling_receiver.TricklingReceiver],
    deploy: Any,
) -> None:
    deploy(PROBE)
    deploy(SLOW.format(target=receivers[0].url))
    with https_receiver.allowed_networks("127.0.0.1/32"):
        for receiver in receivers:
            operations.webhook_create(url=receiver.url, events=["run.started"], definition_id="slow-hook")
    slow = str(operations.start(definition_id="slow-hook", payload={}).run_id)
    # the slow run's segment has recorded its eleven deliveries, and the receivers hold them
    eventually(
        lambda: sum(r.connections() for r in receivers) >= 2,
        timeout=60,
        what="the first deliveries to reach the trickling receivers",
        details=workers.logs,
    )

    took: list[float] = []
    for _ in range(PROBES):
        began = time.monotonic()
        probe = str(operations.start(definition_id="probe", payload={}).run_id)
        eventually(
            lambda probe=probe: Run.objects.get(pk=probe).status == "COMPLETED",
            timeout=30,
            interval=0.02,
            what="a probe run to complete while the receivers trickle",
            details=workers.logs,
        )
        took.append(time.monotonic() - began)
    # every probe ended well within one attempt's deadline: none waited behind a delivery
    assert max(took) < ATTEMPT_SECONDS, took
    assert Run.objects.get(pk=slow).status == "COMPLETED"  # its deliveries are no part of it

    # each attempt that reached a receiver ended at the deadline, logged as what it was
    eventually(
        lambda: WebhookAttempt.objects.filter(event_id__startswith="evt_").count() >= 2,
        timeout=60,
        what="attempts to be logged",
        details=workers.logs,
    )
    attempts = list(WebhookAttempt.objects.all())
    assert attempts
    for attempt in attempts:
        assert attempt.status_code is None  # never the 200 that had not arrived
        assert attempt.error == "the receiver did not answer within the attempt's deadline"
        assert ATTEMPT_SECONDS * 1000 - 100 <= attempt.duration_ms < (ATTEMPT_SECONDS + 3) * 1000
    service = OutboxIntent.objects.get(run_id=slow, kind="SERVICE")
    eventually(
        lambda: OutboxIntent.objects.get(pk=service.pk).last_error != "",
        timeout=60,
        what="the service call's attempt to end",
        details=workers.logs,
    )
    assert OutboxIntent.objects.get(pk=service.pk).status in ("PENDING", "DELIVERING")  # retried later
    assert "timed out (the attempt's deadline)" in workers.logs()
