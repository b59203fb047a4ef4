"""Failing scope rows (engine.txt 338-348), judged by this node's executor (issue #26, item 16).

The story: ``record_failure`` existed and the listing showed its mark, but nothing ever
evaluated a row: a scope's document whose named schema this node no longer ships had its
commands deferred for ever while the definition listing said nothing was wrong. The executor
is driven in this process on purpose: the judgement is per node, by the code the node ships,
and only this process can stop shipping a name.
"""

from __future__ import annotations

from typing import Any

import pytest

from workflows import definitions, operations
from workflows.definitions import catalogs
from workflows.definitions.cache import plan_cache
from workflows.engine import executor
from workflows.models import Command, HistoryEntry, Run

pytestmark = pytest.mark.django_db(transaction=True)

SCOPED = """
definitionId: scoped-order
definitionVersion: 1
contract: {name: scoped-order.v1, signals: {}}
stateSchema: scoped.OrderState
startPayloadSchema: {type: object}
initialStep: done
steps:
  - {id: done, type: complete}
"""


@pytest.fixture
def shipped_name() -> Any:
    catalogs.types.register("scoped.OrderState", {"type": "object"})
    plan_cache.clear()
    forget = getattr(executor, "_marks_written", {}).clear  # what this process wrote is per test
    forget()
    yield
    catalogs.types.unregister("scoped.OrderState")
    plan_cache.clear()
    forget()


def _mark(scope: str) -> str | None:
    return {r.scope: r.failure for r in definitions.list(definition_id="scoped-order")}[scope]


def _drain() -> None:
    executor.drain(budget_seconds=10)


def test_a_scope_row_whose_named_schema_this_node_no_longer_ships_is_deferred_and_marked(
    shipped_name: Any, deploy: Any
) -> None:
    deploy(SCOPED, scope="tenant-a")
    deploy(SCOPED)
    # a release that no longer ships the name: this node cannot build either row's plan
    catalogs.types.unregister("scoped.OrderState")
    plan_cache.clear()
    scoped = operations.start(definition_id="scoped-order", scope="tenant-a", payload={}).run_id
    default = operations.start(definition_id="scoped-order", payload={}).run_id

    _drain()

    start = Command.objects.get(run_id=scoped, kind="START")
    assert (start.status, start.attempts) == ("DEFERRED", 0)  # not runnable here: no attempt spent
    assert Run.objects.get(pk=scoped).status == "PENDING"
    assert HistoryEntry.objects.filter(run_id=scoped, type="COMMAND_DEFERRED").count() == 1
    assert _mark("tenant-a") == "NAME_BINDING_UNRESOLVED"
    # the default scope's row is never marked (its commands are deferred all the same)
    assert Command.objects.get(run_id=default, kind="START").status == "DEFERRED"
    assert _mark("default") is None

    # the name ships again: the row builds, its run goes on and the mark is cleared
    catalogs.types.register("scoped.OrderState", {"type": "object"})
    plan_cache.clear()
    Command.objects.filter(run_id__in=[scoped, default]).update(available_at="2000-01-01T00:00:00Z")
    _drain()

    assert Run.objects.get(pk=scoped).status == "COMPLETED"
    assert Run.objects.get(pk=default).status == "COMPLETED"
    assert _mark("tenant-a") is None


def test_a_mark_is_written_once_not_by_every_command(shipped_name: Any, deploy: Any, monkeypatch: Any) -> None:
    deploy(SCOPED, scope="tenant-a")
    catalogs.types.unregister("scoped.OrderState")
    plan_cache.clear()
    writes: list[Any] = []
    real = executor._write_mark
    monkeypatch.setattr(executor, "_write_mark", lambda key, failure: writes.append(failure) or real(key, failure))
    for _ in range(3):
        operations.start(definition_id="scoped-order", scope="tenant-a", payload={})

    _drain()

    assert Command.objects.filter(kind="START", status="DEFERRED").count() == 3
    assert writes == ["NAME_BINDING_UNRESOLVED"]
    assert _mark("tenant-a") == "NAME_BINDING_UNRESOLVED"
