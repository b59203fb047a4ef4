"""Celery tasks: transport only. Each carries ids; the engine loads, locks and re-checks.

- ``workflows.run`` — a wake-up for one run (after a command was recorded): drain it, then
  whatever else is due, within a bounded budget.
- ``workflows.sweep`` — beat backstop: expired leases, due timers, deferred commands,
  undelivered outbox intents. Progress never depends on a message arriving.
- ``workflows.deliver`` — deliver one outbox intent.
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.db import close_old_connections
from django.utils import timezone

from workflows import conf
from workflows.engine import executor, outbox, wakeups

log = logging.getLogger("workflows.tasks")
ETA_HINT_LIMIT_SECONDS = 600  # later timers are found by the sweep, not by a long-lived ETA message


@shared_task(name="workflows.run", ignore_result=True)
def run_instance(run_id: str) -> int:
    close_old_connections()
    done = executor.drain(run_id=run_id, budget_seconds=conf.get().EXECUTOR.DRAIN_SECONDS)
    done += executor.drain(budget_seconds=2.0)
    return done


@shared_task(name="workflows.sweep", ignore_result=True)
def sweep() -> int:
    close_old_connections()
    if not conf.get().EXECUTOR.ENABLED:
        return 0
    executor.recover_expired_leases()
    for intent_id in outbox.due_intents():
        deliver.delay(intent_id)
    return executor.drain(budget_seconds=conf.get().EXECUTOR.DRAIN_SECONDS)


@shared_task(name="workflows.deliver", ignore_result=True, acks_late=True)
def deliver(intent_id: int) -> str:
    close_old_connections()
    return outbox.deliver(intent_id)


def _publish_runs(items: list[tuple[str, datetime | None]]) -> None:
    now = timezone.now()
    for run_id, available_at in items:
        if available_at is None or available_at <= now:
            run_instance.delay(run_id)
        elif (available_at - now).total_seconds() <= ETA_HINT_LIMIT_SECONDS:
            run_instance.apply_async(args=[run_id], eta=available_at)


def _publish_intents(ids: list[int]) -> None:
    for intent_id in ids:
        deliver.delay(intent_id)


def install() -> None:
    """Connect the engine's after-commit wake-ups to Celery (called from AppConfig.ready)."""
    wakeups.set_notifier(_publish_runs, _publish_intents)
