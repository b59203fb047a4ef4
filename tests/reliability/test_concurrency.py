"""Concurrency on real PostgreSQL: many clients, one run; one key, many deliveries; the
completion, the cancel and the due date racing for one task; starts racing for one key.

Threads join within a deadline (a deadlock fails, never hangs). The executor runs in-process
(the code the Celery tasks run), in threads of its own where the race needs it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from tests.reliability import invariants
from tests.reliability.concurrency import in_threads, with_retries
from workflows import conf, operations
from workflows.engine import db, executor
from workflows.exceptions import IdempotencyConflict, WorkflowError
from workflows.models import Command, HistoryEntry, Run, Task

pytestmark = [pytest.mark.services, pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

FULL = os.environ.get("RELIABILITY_MODE") == "full"

TICKS = """
definitionId: rel-ticks
definitionVersion: 1
contract: {name: relticks.v1, signals: {tick: {type: object}}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialState: "{'ticks': 0}"
initialStep: wait-tick
steps:
  - id: wait-tick
    type: wait-signal
    signal: tick
    set: "{'ticks': state.ticks + 1}"
    next: wait-tick
"""

APPROVAL = """
definitionId: rel-approval
definitionVersion: 1
contract: {name: relapproval.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: review
steps:
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    due: {after: PT1H, next: expired}
    decisions:
      - name: approve
        payloadSchema: {type: object, properties: {comment: {type: string}}}
        next: done
      - {name: reject, next: done}
  - {id: done, type: complete}
  - {id: expired, type: complete}
"""


def checks_hold(definition_id: str) -> None:
    params = {"definition": definition_id}
    for check in (
        invariants.settled_once(params),
        invariants.history_contiguous(params),
        invariants.replay_matches_state(params),
    ):
        assert check.ok, (check.name, check.as_dict())


@pytest.fixture
def many_open_signals(settings: Any) -> Any:
    settings.WORKFLOWS = {**settings.WORKFLOWS, "RECORDING": {**settings.WORKFLOWS.get("RECORDING", {}),
                                                              "MAX_OPEN_SIGNALS_PER_INSTANCE": 5000}}  # fmt: skip
    conf.reload()
    yield
    conf.reload()


def test_a_thousand_signals_from_fifty_clients_are_each_applied_once(
    deploy: Callable[..., Any], many_open_signals: None
) -> None:
    deploy(TICKS)
    run_id = operations.start(definition_id="rel-ticks", payload={}).run_id
    executor.drain(run_id=run_id)
    clients, per_client = 50, 20
    sending = threading.Event()
    sending.set()

    def client(c: int) -> list[int | None]:
        return [
            with_retries(lambda i=i: operations.signal(run_id=run_id, name="tick", payload={"c": c, "i": i},
                                                       idempotency_key=f"tick-{c}-{i}")).command_id
            for i in range(per_client)
        ]  # fmt: skip

    def executor_thread() -> int:
        done = 0
        while sending.is_set():
            done += with_retries(lambda: executor.drain(run_id=run_id, budget_seconds=5))
            time.sleep(0.01)
        return done

    drains: list[Any] = []
    runner = threading.Thread(target=lambda: drains.append(in_threads([executor_thread, executor_thread], timeout=300)))
    runner.start()
    began = time.monotonic()
    answers = in_threads([lambda c=c: client(c) for c in range(clients)], timeout=240)
    recorded_s = time.monotonic() - began
    sending.clear()
    runner.join(300)
    assert not runner.is_alive()
    assert all(not isinstance(r, BaseException) for r in answers), [r for r in answers if isinstance(r, BaseException)]
    while executor.drain(run_id=run_id):
        pass

    ids = [i for r in answers for i in r]
    assert len(set(ids)) == clients * per_client
    signals = Command.objects.filter(run_id=run_id, kind="SIGNAL")
    assert signals.count() == clients * per_client
    assert set(signals.values_list("status", flat=True)) == {"COMPLETE"}
    assert signals.values("dedup_key").distinct().count() == clients * per_client
    run = Run.objects.get(pk=run_id)
    assert (run.state["ticks"], run.open_signals, run.status) == (clients * per_client, 0, "WAITING")
    assert HistoryEntry.objects.filter(run_id=run_id, type="SIGNAL_RECEIVED").count() == clients * per_client
    checks_hold("rel-ticks")
    print(f"1000 signals from 50 clients recorded in {recorded_s:.1f}s, applied by {sum(drains[0])} segments")


def _open_tasks(n: int) -> list[str]:
    run_ids = [operations.start(definition_id="rel-approval", payload={}).run_id for _ in range(n)]
    for run_id in run_ids:
        executor.drain(run_id=run_id)
    return [str(t) for t in Task.objects.filter(run_id__in=run_ids, status="OPEN").values_list("id", flat=True)]


def test_a_completion_delivered_three_times_with_one_key_is_recorded_once(deploy: Callable[..., Any]) -> None:
    deploy(APPROVAL)
    tasks = _open_tasks(40 if FULL else 20)
    differing = set(tasks[::10])  # every tenth task: one of the three deliveries carries another payload

    def deliver(task_id: str, comment: str) -> Any:
        return with_retries(
            lambda: operations.complete_task(
                task_id=task_id, decision="approve", payload={"comment": comment}, idempotency_key=f"k-{task_id}"
            )
        )

    calls, owners = [], []
    for task_id in tasks:
        comments = ["same", "same", "other" if task_id in differing else "same"]
        for comment in comments:
            calls.append(lambda t=task_id, c=comment: deliver(t, c))
            owners.append(task_id)
    results = in_threads(calls, timeout=120)

    by_task: dict[str, list[Any]] = {t: [] for t in tasks}
    for owner, result in zip(owners, results, strict=True):
        by_task[owner].append(result)
    for task_id, answers in by_task.items():
        recorded = {a.command_id for a in answers if not isinstance(a, BaseException)}
        errors = [a for a in answers if isinstance(a, BaseException)]
        assert len(recorded) == 1, (task_id, answers)
        assert all(isinstance(e, IdempotencyConflict) for e in errors), errors
        assert bool(errors) == (task_id in differing), (task_id, answers)
        assert Command.objects.filter(task_id=task_id, kind="COMPLETION").count() == 1
    executor.drain()
    assert set(Task.objects.filter(id__in=tasks).values_list("status", flat=True)) == {"COMPLETED"}
    checks_hold("rel-approval")


def _make_due(run_id: Any) -> None:
    db.execute(
        "UPDATE workflow_commands SET fire_at = now() - interval '1 second', order_at = now() - interval '1 second', "
        "available_at = now() - interval '1 second' WHERE run_id = %s AND kind = 'TIMER' AND status = 'PENDING'",
        [run_id],
    )
    db.execute("UPDATE workflow_timers SET fire_at = now() - interval '1 second' WHERE run_id = %s", [run_id])


def test_completion_cancel_and_due_date_racing_for_one_task_end_it_once(deploy: Callable[..., Any]) -> None:
    deploy(APPROVAL)
    rounds = 30 if FULL else 12
    tasks = _open_tasks(rounds)
    outcomes: Counter[str] = Counter()
    rng = random.Random(13)
    for task_id in tasks:
        run_id = Task.objects.get(pk=task_id).run_id
        _make_due(run_id)

        def complete(t: str = task_id) -> Any:
            return operations.complete_task(task_id=t, decision="approve", payload={}, idempotency_key=f"c-{t}")

        def cancel(r: Any = run_id) -> Any:
            return with_retries(lambda: operations.cancel(run_id=r, reason="race"))

        def due(r: Any = run_id) -> Any:
            return executor.drain(run_id=r)

        # released together, then each after its own few milliseconds, so every order happens
        jitter = [rng.uniform(0, 0.03) for _ in range(3)]
        calls = [complete, cancel, due]
        results = in_threads(
            [lambda f=f, j=j: (time.sleep(j), f())[1] for f, j in zip(calls, jitter, strict=True)], timeout=60
        )
        for result in results:
            if isinstance(result, BaseException):
                assert isinstance(result, WorkflowError), repr(result)  # refused, never crashed
        executor.drain(run_id=run_id)
        task = Task.objects.get(pk=task_id)
        run = Run.objects.get(pk=run_id)
        ends = HistoryEntry.objects.filter(
            run_id=run_id, type__in=["TASK_COMPLETED", "TASK_EXPIRED", "TASK_CANCELLED", "TASK_WITHDRAWN"]
        ).values_list("type", flat=True)
        assert len(ends) == 1, list(ends)
        assert task.status in ("COMPLETED", "EXPIRED", "CANCELLED"), task.status
        assert run.status in ("COMPLETED", "CANCELLED"), run.status
        assert not Command.objects.filter(
            run_id=run_id, status__in=["PENDING", "CLAIMED", "DEFERRED", "PARKED"]
        ).exists()
        outcomes[f"{task.status}/{run.status}"] += 1
    checks_hold("rel-approval")
    print(f"one terminal outcome per task over {rounds} races: {dict(outcomes)}")


def test_twenty_concurrent_starts_with_one_key_make_one_run(deploy: Callable[..., Any]) -> None:
    deploy(APPROVAL)

    def start() -> Any:
        return with_retries(lambda: operations.start(definition_id="rel-approval", payload={}, idempotency_key="once"))

    results = in_threads([start] * 20, timeout=60)
    assert all(not isinstance(r, BaseException) for r in results), results
    assert {(r.run_id, r.command_id) for r in results} == {(results[0].run_id, results[0].command_id)}
    assert Run.objects.filter(definition_id="rel-approval").count() == 1
    assert sum(1 for r in results if r.replay) == 19
    connection.close()
