"""Recording conformance (issue #26): pin admission under the definition lock, which database
failures are retryable, and a recording's lock bound staying its own.

Each test opens with the deviation it guards against (reference: engine.txt).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from tests.engine import documents
from tests.support.waiting import eventually
from workflows import definitions, operations
from workflows.definitions import schemas
from workflows.exceptions import LifecycleError, LockTimeout, PersistenceError, PinnedInstances
from workflows.models import Command, DefinitionVersion, Run

pytestmark = pytest.mark.services

SENTINEL = "LEAK-SENTINEL-26c1"
ORDER = documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")
V2 = ORDER.replace("definitionVersion: 1", "definitionVersion: 2")


def status_of_version(version: int) -> str:
    return str(DefinitionVersion.objects.get(definition_id="order-signal", version=version).status)


def in_another_connection(work: Callable[[], Any]) -> dict[str, Any]:
    """Run ``work`` on a thread (its own connection); answers {"result"} or {"error"}."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["result"] = work()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def deploy_two_versions(deploy: Any) -> None:
    """v1 and v2 published, v2 the current version (so v1 may be deprecated and retired)."""
    deploy(ORDER, activate=False)
    deploy(V2)


# --- pin admission (engine 306, 358) -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_version_deprecated_after_the_selection_read_is_refused_at_admission(
    deploy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start chose its version from the selection read and inserted the run without looking
    at the row again, so a deprecation committed in between left a run pinned to a deprecated
    version. Pin admission re-reads the row's status under the definition lock."""
    deploy_two_versions(deploy)
    real_validate = schemas.validate

    def deprecated_meanwhile(schema: Any, payload: Any) -> Any:
        # between the selection read and the insert: another node deprecates version 1
        done = in_another_connection(
            lambda: definitions.deprecate(scope="default", definition_id="order-signal", version=1)
        )
        done["thread"].join(10)
        assert "result" in done, done.get("error")
        return real_validate(schema, payload)

    monkeypatch.setattr(schemas, "validate", deprecated_meanwhile)
    with pytest.raises(LifecycleError) as refused:
        operations.start(definition_id="order-signal", version=1, payload={"order": "A-1"})
    assert refused.value.code == "INVALID_TRANSITION"
    assert "deprecated" in refused.value.message
    assert not Run.objects.exists() and not Command.objects.exists()
    assert status_of_version(1) == "DEPRECATED"


@pytest.mark.django_db(transaction=True)
def test_a_retirement_waits_for_an_open_start_and_then_counts_its_run_as_a_pin(deploy: Any) -> None:
    """A start in flight was invisible to a retirement's pin count, so a version could be
    deprecated and retired under a PENDING run that committed a moment later. The start holds
    the definition lock (shared) until it commits; the lifecycle takes it exclusively."""
    deploy_two_versions(deploy)
    with transaction.atomic():
        recorded = operations.start(definition_id="order-signal", version=1, payload={"order": "A-2"})

        def deprecate_and_retire() -> Any:
            definitions.deprecate(scope="default", definition_id="order-signal", version=1)
            return definitions.retire(scope="default", definition_id="order-signal", version=1)

        lifecycle = in_another_connection(deprecate_and_retire)

        def lifecycle_waits_or_ended() -> bool:
            if not lifecycle["thread"].is_alive():
                return True
            with connection.cursor() as cursor:
                # pg_locks, not pg_stat_activity (whose snapshot holds for this transaction)
                cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                return bool(cursor.fetchone()[0])

        eventually(lifecycle_waits_or_ended, timeout=10, what="the lifecycle to wait for the start")
    lifecycle["thread"].join(10)
    assert isinstance(lifecycle.get("error"), PinnedInstances), lifecycle
    assert status_of_version(1) == "DEPRECATED"
    run = Run.objects.get(pk=recorded.run_id)
    assert (run.status, run.version) == ("PENDING", 1)


@pytest.mark.django_db
def test_a_start_of_an_available_version_is_admitted(deploy: Any) -> None:
    deploy_two_versions(deploy)
    recorded = operations.start(definition_id="order-signal", version=1, payload={"order": "A-3"})
    assert Run.objects.get(pk=recorded.run_id).version == 1
    assert Command.objects.get(run_id=recorded.run_id).kind == "START"


# --- which database failures are retryable (engine 464-465) --------------------------------------


def failing_with(sqlstate_name: str) -> Callable[..., Any]:
    """A schema check that meets a real database error of that condition (a recording-path
    statement failing on the server)."""

    def validate(schema: Any, payload: Any) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION '{SENTINEL}' USING ERRCODE = '{sqlstate_name}'; END $$")
        return []

    return validate


@pytest.mark.django_db(transaction=True)
def test_a_deterministic_database_failure_while_recording_is_not_retryable(
    deploy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every database failure on the recording path was reported retryable (503, retry the
    transaction), also one that fails the same way every time. Only transient ones are."""
    deploy(ORDER)
    monkeypatch.setattr(schemas, "validate", failing_with("check_violation"))
    with pytest.raises(PersistenceError) as refused:
        operations.start(definition_id="order-signal", payload={"order": "A-4"})
    assert refused.value.retryable is False
    assert refused.value.status == 500
    assert refused.value.code == "PERSISTENCE"
    assert "23514" in refused.value.message
    assert SENTINEL not in refused.value.message and "Error" not in refused.value.message
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("condition", "expected"),
    [("serialization_failure", PersistenceError), ("deadlock_detected", LockTimeout), ("admin_shutdown", None)],
)
def test_a_transient_database_failure_while_recording_is_retryable(
    deploy: Any, monkeypatch: pytest.MonkeyPatch, condition: str, expected: Any
) -> None:
    deploy(ORDER)
    monkeypatch.setattr(schemas, "validate", failing_with(condition))
    with pytest.raises((PersistenceError, LockTimeout)) as refused:
        operations.start(definition_id="order-signal", payload={"order": "A-5"})
    if expected is not None:
        assert isinstance(refused.value, expected)
    assert refused.value.retryable is True and refused.value.status == 503
    assert SENTINEL not in refused.value.message and "Error" not in refused.value.message
    assert not Run.objects.exists()


# --- the lock bound is the recording's (engine 120) ---------------------------------------------


def lock_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("callers", [None, "7s"])
def test_a_recording_leaves_the_callers_lock_timeout_as_it_was(
    deploy: Any, drain: Any, settings: Any, callers: str | None
) -> None:
    """Taking the execution lock set lock_timeout with SET LOCAL and left it set, so every
    later lock wait of the caller's transaction was cut at LOCK_TIMEOUT_MS too (and a caller's
    own bound was lost). The bound applies to the execution lock's wait only."""
    deploy(ORDER)
    recorded = operations.start(definition_id="order-signal", payload={"order": "A-6"})
    drain(recorded.run_id)
    with transaction.atomic():
        if callers:
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{callers}'")
        before = lock_timeout()
        operations.signal(run_id=recorded.run_id, name="paid", payload={"amount": 1})
        assert lock_timeout() == before
        operations.cancel(run_id=recorded.run_id, reason="done with it")
        assert lock_timeout() == before
    assert Run.objects.get(pk=recorded.run_id).status == "CANCELLED"


@pytest.mark.django_db(transaction=True)
def test_a_completion_leaves_the_callers_lock_timeout_as_it_was(deploy: Any, drain: Any) -> None:
    deploy(documents.APPROVAL)
    recorded = operations.start(definition_id="approval", payload={"number": "P-1", "total": 5000})
    drain(recorded.run_id)
    from workflows.models import Task

    task = Task.objects.get(run_id=recorded.run_id)
    with transaction.atomic():
        before = lock_timeout()
        operations.complete_task(task_id=task.pk, decision="approve", payload={"comment": "ok"})
        assert lock_timeout() == before
