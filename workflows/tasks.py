"""Celery tasks: transport only. Each carries ids; the engine loads, locks and re-checks.

- ``workflows.run`` — a wake-up for one run (after a command was recorded): run that run's
  commands, and deliver the outbox intents its segments record (claimed in the segment's
  transaction) without a message each.
- ``workflows.sweep`` — beat backstop: expired leases, due timers, deferred commands,
  undelivered outbox intents, commands whose wake-up never came. Progress never depends on a
  message arriving.
- ``workflows.deliver`` — deliver one outbox intent, always on the outbound queue
  (``WORKFLOWS["OUTBOUND"]["QUEUE"]``) and its own worker: a delivery waits on another party (a
  webhook receiver, a service, the mail server), so it never holds an executor's worker.
- ``workflows.bulk_apply`` — apply a bulk operation's batches (``engine/bulk_ops.py``) for at
  most ``EXECUTOR.DRAIN_SECONDS``, then hand the rest to a new message; the sweep resumes an
  operation whose batches stopped (a lost message, a killed worker).
- ``workflows.migration_apply`` — apply a migration record in the background, batch by batch,
  while holding its lease; the sweep sends it again for a record whose lease lapsed (a killed
  worker, a lost message), which carries on from the last committed batch.
- ``workflows.retention`` — beat, hourly: purge (or archive and purge) the ended runs the
  retention policy lets go and expire old idempotency keys, in bounded batches of one
  transaction each (a repeated or lost message is harmless: the rows say what is left).
- ``workflows.run_totals`` — beat, every minute: count the ended runs per revision and status
  into the operations dashboard's snapshot (``engine/totals.py``), which the dashboard shows
  with the time it was counted at (a lost message leaves the previous count, still dated).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from celery import shared_task
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from workflows import conf, operations, publish
from workflows.engine import bulk_ops, executor, migration, outbox, wakeups

log = logging.getLogger("workflows.tasks")
# Switchyard's tasks carry their own options, so a host needs no global Celery setting and its
# own tasks keep the host's (docs/install.md, step 4): no result stored; acknowledged after the
# task ran and re-queued when its worker dies (every task re-checks in the database, so a repeat
# is harmless).
OWN_OPTIONS = {"ignore_result": True, "acks_late": True, "reject_on_worker_lost": True}
ETA_HINT_LIMIT_SECONDS = 600  # later timers are found by the sweep, not by a long-lived ETA message
# The sweep leaves commands that became available this recently to their wake-ups (a burst
# would otherwise be drained twice, by the messages and by the sweep); a lost wake-up waits at
# most this much longer.
SWEEP_GRACE_SECONDS = 2.0
# Django's health check (CONN_HEALTH_CHECKS) pings the server before the first query after
# close_old_connections(): once per task. A connection that served a task this recently
# without an error is not pinged again; a broken one fails that task's first statement, is
# marked, and is replaced by the next task (the sweep redoes what the failed task left).
CONNECTION_CHECK_SECONDS = 1.0
_connection_checked = 0.0


def _connection_ready() -> None:
    global _connection_checked
    now = time.monotonic()
    recent = now - _connection_checked <= CONNECTION_CHECK_SECONDS
    if connection.connection is None or connection.errors_occurred or not recent:
        close_old_connections()
        _connection_checked = now


@shared_task(name="workflows.run", **OWN_OPTIONS, Strategy="workflows.strategy:inline")
def run_instance(run_id: str) -> int:
    _connection_ready()
    with wakeups.inline_delivery() as claimed:
        try:
            return executor.drain_run(run_id, budget_seconds=conf.get().EXECUTOR.DRAIN_SECONDS)
        finally:
            _deliver_claimed(claimed)


def _deliver_claimed(claimed: list[dict]) -> None:
    """Deliver the intents this task's segments claimed (committed); one that cannot be
    delivered now is retried like any other (a failure) or after its lease (a crash)."""
    while claimed:
        intent = claimed.pop(0)
        try:
            outbox.deliver_claimed(intent)
        except Exception:
            log.warning("inline delivery of intent %s failed; the sweep will retry it", intent["id"], exc_info=True)


@shared_task(name="workflows.sweep", **OWN_OPTIONS, routine=True)
def sweep() -> int:
    close_old_connections()
    if not conf.get().EXECUTOR.ENABLED:
        return 0
    with transaction.atomic():  # one transaction for both, not one each (every 2 s)
        recovered = executor.recover_expired_runs()
        due = outbox.intents_to_send()  # only those with no delivery message queued (a lease each)
    _publish_intents(due)  # onto the outbound queue: no HTTP on the executor's workers
    for operation_id in operations.bulk_operations_stalled():
        bulk_apply.delay(operation_id)
    _publish_migrations(operations.migration_due_background())
    budget = conf.get().EXECUTOR.DRAIN_SECONDS
    done = sum(executor.drain(run_id=run_id, budget_seconds=budget) for run_id in recovered)
    if _backlog_defers_sweep():
        return done
    return done + executor.drain(budget_seconds=budget, min_age_seconds=SWEEP_GRACE_SECONDS)


# Behind a backlog of wake-ups the sweep's drain would run the very commands those messages
# are about to run (each then a wasted message). While more than SWEEP_BACKLOG messages are
# queued it leaves due commands to them, for at most SWEEP_MAX_DEFER_SECONDS in a row, so a
# command whose wake-up was lost still runs under a backlog that never clears.
SWEEP_BACKLOG = 64
SWEEP_MAX_DEFER_SECONDS = 30.0
_sweep_deferred_since: float | None = None


def _backlog_defers_sweep() -> bool:
    global _sweep_deferred_since
    queued = _queued_messages()
    now = time.monotonic()
    if queued is None or queued <= SWEEP_BACKLOG:
        _sweep_deferred_since = None
        return False
    if _sweep_deferred_since is None:
        _sweep_deferred_since = now
    if now - _sweep_deferred_since > SWEEP_MAX_DEFER_SECONDS:
        _sweep_deferred_since = None
        return False
    return True


def _queued_messages() -> int | None:
    """Messages waiting in the default queue (None when the broker cannot say)."""
    app = run_instance.app
    try:
        with app.connection_or_acquire() as conn:
            declared = conn.default_channel.queue_declare(queue=app.conf.task_default_queue, passive=True)
            return int(declared.message_count)
    except Exception:  # the sweep goes on without the hint
        log.debug("queue length unavailable", exc_info=True)
        return None


@shared_task(name="workflows.deliver", **OWN_OPTIONS)
def deliver(intent_id: int) -> str:
    close_old_connections()
    return outbox.deliver(intent_id)


@shared_task(name="workflows.bulk_apply", **OWN_OPTIONS)
def bulk_apply(operation_id: int) -> int:
    """Batches of one bulk operation until it is done, another worker holds what is left, or
    the time budget is spent (then a new message carries on). Answers the items applied."""
    close_old_connections()
    deadline = time.monotonic() + conf.get().EXECUTOR.DRAIN_SECONDS
    applied = 0
    while True:
        batch = operations.bulk_operation_apply_batch(operation_id=int(operation_id))
        applied += batch.claimed
        if batch.done or not batch.claimed:
            return applied
        if time.monotonic() >= deadline:
            bulk_apply.delay(int(operation_id))
            return applied


@shared_task(name="workflows.migration_apply", **OWN_OPTIONS)
def migration_apply(record_id: int) -> str:
    """Apply a background migration for at most ``EXECUTOR.DRAIN_SECONDS``, then hand on to a
    new message (other work gets the worker in between). A repeated message finds the record
    held by its first task and does nothing."""
    close_old_connections()
    outcome = operations.migration_run_background(
        record_id=int(record_id), budget_seconds=conf.get().EXECUTOR.DRAIN_SECONDS
    )
    if outcome == "more":
        _publish_migrations([int(record_id)])
    return outcome


def _publish_migrations(ids: list[int]) -> None:
    for record_id in ids:
        publish.publish(migration_apply, [int(record_id)], f"[{int(record_id)}]")


@shared_task(name="workflows.retention", **OWN_OPTIONS)
def retention() -> dict[str, int]:
    close_old_connections()
    result = operations.apply_retention()
    if result["more"]:  # a backlog: the next round follows now rather than in an hour
        retention.delay()
    return result


@shared_task(name="workflows.run_totals", **OWN_OPTIONS, routine=True)
def run_totals() -> str:
    close_old_connections()
    return operations.run_totals_refresh().isoformat()


# The arguments' text for the worker's logs and the monitors (``argsrepr``), given rather than
# left to Celery, whose ``saferepr`` of even one short argument is about a third of a publish;
# with a Redis broker the message is written directly (``workflows.publish``).
def _publish_runs(items: list[tuple[str, datetime | None]]) -> None:
    now = timezone.now()
    for run_id, available_at in items:
        if available_at is None or available_at <= now:
            publish.publish(run_instance, [run_id], f"['{run_id}']")
        elif (available_at - now).total_seconds() <= ETA_HINT_LIMIT_SECONDS:
            run_instance.apply_async(args=[run_id], eta=available_at, argsrepr=f"['{run_id}']", kwargsrepr="{}")


def outbound_queue() -> str:
    """The queue deliveries go to (``WORKFLOWS["OUTBOUND"]["QUEUE"]``), served by a worker of
    its own (``celery worker --queues <it>``), never by the executor's."""
    return str(conf.get().OUTBOUND.QUEUE)


def _publish_intents(ids: list[int]) -> None:
    queue = outbound_queue()
    for intent_id in ids:
        deliver.apply_async(args=[int(intent_id)], queue=queue, argsrepr=f"[{int(intent_id)}]", kwargsrepr="{}")


@worker_init.connect
def _carry_delivered_marks(**_: object) -> None:
    """A worker's wake-ups carry the delivered marks of the intents it delivered on their next
    claim (``outbox.enable_carried_marks``); pool processes forked later inherit the switch."""
    outbox.enable_carried_marks()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _write_carried_marks(**_: object) -> None:
    try:
        outbox.flush_marks()
    except Exception:  # the intents' leases lapse and they are delivered again
        log.warning("delivered marks not written at shutdown", exc_info=True)


class QuietRoutine(logging.Filter):
    """Drops Celery's INFO lines about a routine task (one declared with ``routine=True``: the
    sweeps the beat sends every two seconds, the dashboard's totals): beat's "Sending due task",
    the worker's "received" and "succeeded" — six lines every two seconds that buried what
    happened. A routine task's failure is logged at ERROR and stays; what a sweep recovers is
    logged by the ``workflows`` loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        args = record.args
        if isinstance(args, dict):  # the worker's "Task %(name)s[%(id)s] received / succeeded"
            name = args.get("name")
        elif isinstance(args, tuple) and len(args) == 2 and record.name == "celery.beat":
            name = args[1]  # "Scheduler: Sending due task %s (%s)": the entry, the task
        else:
            return True
        from celery import current_app

        return not getattr(current_app.tasks.get(str(name)), "routine", False)


ROUTINE_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")


def install() -> None:
    """Connect the engine's after-commit wake-ups to Celery (called from AppConfig.ready)."""
    for name in ROUTINE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietRoutine) for f in logger.filters):
            logger.addFilter(QuietRoutine())
    wakeups.set_notifier(_publish_runs, _publish_intents)
    bulk_ops.set_notifier(lambda operation_id: bulk_apply.delay(operation_id))
    migration.background.set_notifier(_publish_migrations)
