"""How a ``--pool=solo`` worker runs a wake-up message: the task function called inline.

Celery's default strategy builds a ``Request`` for every message and runs it through the
pool's tracer: the request's headers and reprs, the worker's state bookkeeping, the task's
request context, three signals (prerun, postrun, success) and their receivers, the success
log record. For a wake-up — a run id that asks for an executor pass, with no result, no
retries and nothing to trace, whose work is all in the database — that is about a fifth of
a worker's CPU per message on a 2-core machine (``docs/performance.md``). In a solo worker
the task runs in the consumer's own thread anyway; this strategy calls the task's function
there directly and acknowledges the message after it, as ``acks_late`` does.

Only the plain case takes this path: a solo pool, no task events, no rate limit, a
protocol-2 message due now (no ETA, no expiry, not revoked) with no callbacks, errbacks,
chain or chord. Everything else — a prefork worker above all, which must hand the message to
a child — goes through Celery's default strategy unchanged. A failure is logged (by type, never
with arguments or payloads) and the message acknowledged, as Celery does for a failed
``acks_late`` task; the sweep redoes what a failed or lost wake-up left, so delivery semantics
are unchanged: a message lost with a killed worker is found again in the database.

Not kept on this path: the worker's request bookkeeping, so ``celery inspect active`` and the
task counters of ``inspect stats`` leave these messages out.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.concurrency.solo import TaskPool as SoloPool
from celery.worker.strategy import default

log = logging.getLogger("workflows.tasks")


def inline(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """A Celery task strategy (``Task.Strategy``): see the module docstring."""
    fallback = default(task, app, consumer, **kwargs)
    eventer = consumer.event_dispatcher
    if (
        not isinstance(consumer.pool, SoloPool)
        or (eventer is not None and eventer.enabled and task.send_events)
        or (not consumer.disable_rate_limits and task.rate_limit)
    ):
        return fallback
    run = task.run
    name = task.name
    revoked = consumer.controller.state.revoked
    connection_errors = consumer.connection_errors

    def handle(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **extra: Any) -> Any:
        headers = message.headers
        if (
            body is not None
            or callbacks
            or headers.get("eta")
            or headers.get("expires")
            or headers.get("id") in revoked
            or headers.get("group")
            or "args" in message.payload  # protocol 1 (the payload is the decoded body)
        ):
            return fallback(message, body, ack, reject, callbacks, **extra)
        args, kwargs_, embed = message.payload
        if embed and any(embed.get(key) for key in ("callbacks", "errbacks", "chain", "chord")):
            return fallback(message, body, ack, reject, callbacks, **extra)
        try:
            run(*args, **kwargs_)
        except Exception as exc:  # as Celery's tracer: logged, acknowledged
            log.error("task %s failed (%s)", name, type(exc).__name__, exc_info=True)
        finally:
            ack(log, connection_errors)
        return None

    return handle
