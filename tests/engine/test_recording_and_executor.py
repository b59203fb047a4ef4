"""Recording and the executor, driven in-process against real PostgreSQL."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.engine import documents
from tests.support.ops import make_due
from workflows import operations
from workflows.definitions import catalogs
from workflows.engine import db, executor
from workflows.exceptions import (
    IdempotencyConflict,
    InstanceNotFound,
    InvalidPayload,
    NoCurrentVersion,
    SignalLimit,
    SignalRejected,
)
from workflows.models import Command, HistoryEntry, Run, Timer

SENTINEL = "LEAK-SENTINEL-7f3a"
RESERVED: list[Any] = []


@pytest.fixture(autouse=True)
def _service_handler() -> Any:
    @catalogs.callbacks.register("test.reserve", category="service")
    def reserve(payload: Any, headers: dict[str, str]) -> None:
        RESERVED.append((payload, headers))

    yield
    catalogs.callbacks.unregister("test.reserve", "service")
    RESERVED.clear()


def history_types(run_id: Any) -> list[str]:
    return list(HistoryEntry.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True))


def statuses(run_id: Any) -> list[tuple[str, str]]:
    return list(Command.objects.filter(run_id=run_id).order_by("seq").values_list("kind", "status"))


@pytest.mark.django_db(transaction=True)
class TestStartToCompletion:
    def test_start_service_signal_complete(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-1"})
        assert recorded.kind == "START" and recorded.status == "PENDING"
        assert Run.objects.get(pk=recorded.run_id).status == "PENDING"

        drain()
        run = Run.objects.get(pk=recorded.run_id)
        assert run.status == "WAITING" and run.current_step == "wait-payment"
        assert run.state == {"order": "A-1", "paid": 0.0}

        operations.signal(run_id=run.id, name="paid", payload={"amount": 12.5})
        drain()
        run.refresh_from_db()
        assert run.status == "COMPLETED"
        assert run.state["paid"] == 12.5
        assert statuses(run.id) == [("START", "COMPLETE"), ("TIMER", "CANCELLED"), ("SIGNAL", "COMPLETE")]
        types = history_types(run.id)
        assert types[:3] == ["COMMAND_RECEIVED", "STATE_BASELINE", "WORKFLOW_STARTED"]
        assert "SIGNAL_RECEIVED" in types and "WORKFLOW_COMPLETED" in types
        seqs = list(HistoryEntry.objects.filter(run_id=run.id).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1))
        # the service intent was delivered after commit, with attribution headers
        from workflows.engine import outbox

        for intent_id in outbox.due_intents():
            outbox.deliver(intent_id)
        assert RESERVED and RESERVED[0][1]["x-workflow-actor-kind"] == "NONE"

    def test_signal_sent_before_the_wait_is_applied_once(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-2"})
        operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 3})
        drain()
        run = Run.objects.get(pk=recorded.run_id)
        assert run.status == "COMPLETED"
        assert run.state["paid"] == 3
        assert [s for k, s in statuses(run.id) if k == "SIGNAL"] == ["COMPLETE"]
        assert history_types(run.id).count("SIGNAL_RECEIVED") == 1
        assert run.open_signals == 0

    def test_signal_for_a_wait_not_reached_is_parked_then_applied(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-3"})
        # a signal of a declared name the run does not wait for yet: parked at its first segment
        drain()
        operations.signal(run_id=recorded.run_id, name="cancelled")
        drain()
        assert ("SIGNAL", "REJECTED") in statuses(recorded.run_id)  # the plan never waits for it

    def test_duplicate_signal_key_has_one_effect_and_conflicting_payload_is_refused(
        self, deploy: Any, drain: Any
    ) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-4"})
        drain()
        first = operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 5}, idempotency_key="k1")
        again = operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 5}, idempotency_key="k1")
        assert again.command_id == first.command_id and again.replay
        with pytest.raises(IdempotencyConflict) as refused:
            operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": SENTINEL}, idempotency_key="k1")
        assert refused.value.code == "IDEMPOTENCY_CONFLICT"
        assert SENTINEL not in str(refused.value)
        drain()
        assert Command.objects.filter(run_id=recorded.run_id, kind="SIGNAL").count() == 1
        assert Run.objects.get(pk=recorded.run_id).status == "COMPLETED"

    def test_timeout_beats_a_late_signal(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-5"})
        drain()
        make_due(recorded.run_id, "TIMEOUT")
        operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 1})  # after the fire time
        drain()
        run = Run.objects.get(pk=recorded.run_id)
        assert run.status == "FAILED" and run.failure_code == "payment-timeout"
        assert ("TIMER", "COMPLETE") in statuses(run.id)
        signal_status = Command.objects.get(run_id=run.id, kind="SIGNAL").status
        assert signal_status in ("PARKED", "REJECTED")
        assert "TIMEOUT" in history_types(run.id)
        assert "SIGNAL_RECEIVED" not in history_types(run.id)

    def test_cancel_of_a_waiting_run_settles_every_open_command(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-6"})
        drain()
        operations.signal(run_id=recorded.run_id, name="cancelled")  # pending behind nothing: will run
        operations.cancel(run_id=recorded.run_id, reason="customer asked")
        run = Run.objects.get(pk=recorded.run_id)
        assert run.status == "CANCELLED" and run.open_signals == 0
        assert {s for _, s in statuses(run.id) if _ != "START"} == {"CANCELLED"}
        assert Timer.objects.get(run_id=run.id).status == "CANCELLED"
        types = history_types(run.id)
        assert types.count("COMMAND_CANCELLED") == 2 and "WORKFLOW_CANCELLED" in types
        with pytest.raises(SignalRejected):
            operations.signal(run_id=run.id, name="paid", payload={"amount": 1})
        with pytest.raises(SignalRejected):
            operations.cancel(run_id=run.id)


@pytest.mark.django_db(transaction=True)
class TestRefusals:
    def test_unknown_definition_has_no_current_version(self, db: None) -> None:
        with pytest.raises(NoCurrentVersion) as refused:
            operations.start(definition_id="nope", payload={})
        assert refused.value.code == "NO_CURRENT_VERSION"

    def test_start_payload_violating_the_schema_is_refused_value_free(self, deploy: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        with pytest.raises(InvalidPayload) as refused:
            operations.start(definition_id="order-signal", payload={"order": SENTINEL * 10})
        assert refused.value.code == "INVALID_PAYLOAD"
        assert refused.value.violations and refused.value.violations[0].pointer == "/order"
        assert SENTINEL not in json.dumps([v.as_dict() for v in refused.value.violations]) + str(refused.value)
        assert Run.objects.count() == 0

    def test_oversized_and_too_deep_payloads_are_refused(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-7"})
        drain()
        deep: Any = {"amount": 1}
        for _ in range(70):
            deep = [deep]
        with pytest.raises(InvalidPayload) as refused:
            operations.signal(run_id=recorded.run_id, name="paid", payload=deep)
        assert "depth 64" in str(refused.value)
        with pytest.raises(InvalidPayload) as refused:
            operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 1, "x": SENTINEL * 70000})
        assert "maxPayloadBytes" in str(refused.value) and SENTINEL not in str(refused.value)
        assert not Command.objects.filter(run_id=recorded.run_id, kind="SIGNAL").exists()

    def test_undeclared_signal_and_unknown_run(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "A-8"})
        with pytest.raises(SignalRejected) as refused:
            operations.signal(run_id=recorded.run_id, name="shipped", payload={"secret": SENTINEL})
        assert refused.value.code == "SIGNAL_REJECTED" and SENTINEL not in str(refused.value)
        with pytest.raises(InstanceNotFound):
            operations.signal(run_id=uuid.uuid4(), name="paid")

    def test_open_signal_limit(self, deploy: Any, settings: Any) -> None:
        from workflows import conf

        settings.WORKFLOWS = {"RECORDING": {"MAX_OPEN_SIGNALS_PER_INSTANCE": 2}}
        conf.reload()
        try:
            deploy(documents.ORDER_SIGNAL)
            recorded = operations.start(definition_id="order-signal", payload={"order": "A-9"})
            operations.signal(run_id=recorded.run_id, name="cancelled")
            operations.signal(run_id=recorded.run_id, name="cancelled")
            with pytest.raises(SignalLimit) as refused:
                operations.signal(run_id=recorded.run_id, name="cancelled")
            assert refused.value.code == "SIGNAL_LIMIT"
        finally:
            settings.WORKFLOWS = {}
            conf.reload()


@pytest.mark.django_db(transaction=True)
class TestRecovery:
    def test_failing_command_dead_letters_and_retry_recovers(self, deploy: Any, drain: Any, settings: Any) -> None:
        from workflows import conf

        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "B-1"})
        # the START keeps dying mid-segment (a crash: its claim lapses, the attempt stays spent)
        for _ in range(conf.get().EXECUTOR.MAX_ATTEMPTS):
            head = executor.peek(10, recorded.run_id)[0]
            assert executor.claim(head, lease_seconds=30, max_attempts=conf.get().EXECUTOR.MAX_ATTEMPTS)
            db.execute(
                "UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE id = %s", [head.id]
            )
            assert executor.recover_expired_leases() == 1
        drain()
        run = Run.objects.get(pk=recorded.run_id)
        assert run.status == "FAILED" and Command.objects.get(run_id=run.id, kind="START").status == "DEAD"
        operations.retry(run_id=run.id)
        drain()
        run.refresh_from_db()
        assert run.status == "WAITING" and run.current_step == "wait-payment"
        assert Command.objects.get(run_id=run.id, kind="START").status == "SUPERSEDED"

    def test_node_without_the_plan_defers_without_spending_attempts(self, deploy: Any, drain: Any) -> None:
        deploy(documents.ORDER_SIGNAL)
        recorded = operations.start(definition_id="order-signal", payload={"order": "B-2"})
        db.execute("UPDATE workflow_runs SET plan_hash = 'f' || substr(plan_hash, 2) WHERE id = %s", [recorded.run_id])
        drain()
        start = Command.objects.get(run_id=recorded.run_id, kind="START")
        assert start.status == "DEFERRED" and start.attempts == 0 and start.deferral_count == 1
        assert history_types(recorded.run_id) == ["COMMAND_DEFERRED"]
        assert Run.objects.get(pk=recorded.run_id).status == "PENDING"
