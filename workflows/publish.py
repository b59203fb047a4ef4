"""Wake-ups published straight onto a Redis broker's list.

``Task.apply_async`` costs more CPU than anything else a recording does besides its SQL
(about 0.6 ms per message on a 2-core VM: options merged, the route looked up, headers built, a
producer taken from the pool, kombu's envelope) for what ends as one ``LPUSH`` of a JSON
envelope onto the queue's list. With a plain Redis broker (kombu's virtual Redis transport)
the engine's wake-ups and deliveries are published as that envelope directly: Celery's own
protocol-2 message (``amqp.as_task_v2``), kombu's envelope (base64 body, delivery tag, the
anonymous exchange with the queue as routing key, as Celery sends it), the same list. Workers
cannot tell the difference. Any other broker, a routed or prioritised queue, a key prefix, a
delay (ETA), a failure to write or ``task_always_eager`` goes through ``apply_async``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import uuid
from typing import Any

log = logging.getLogger("workflows.tasks")


class _Direct:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked: dict[str, str | None] = {}  # task name -> its queue, None: not direct
        self.client: Any = None
        self.pid = 0

    def queue_of(self, task: Any) -> str | None:
        name = task.name
        if name not in self.checked:
            self.checked[name] = _direct_queue(task)
        return self.checked[name]

    def redis(self, app: Any) -> Any:
        if self.client is None or self.pid != os.getpid():  # a fork gets its own connections
            with self.lock:
                if self.client is None or self.pid != os.getpid():
                    import redis

                    self.client = redis.Redis.from_url(app.conf.broker_url)
                    self.pid = os.getpid()
        return self.client


_direct = _Direct()


def _direct_queue(task: Any) -> str | None:
    """The list a message of ``task`` goes to when it can be published directly, else None."""
    app = task.app
    conf = app.conf
    url = str(conf.broker_url or "")
    transport = str(conf.broker_transport or "")
    options = dict(conf.broker_transport_options or {})
    if not url.startswith("redis://") or transport not in ("", "redis", "workflows.broker:Transport"):
        return None
    if options.get("global_keyprefix") or options.get("priority_steps") or conf.task_default_priority:
        return None
    if conf.task_routes or conf.task_queues or conf.task_create_missing_queues is False:
        return None
    if task.priority or getattr(task, "queue", None) or conf.task_protocol != 2 or conf.task_serializer != "json":
        return None
    if conf.task_compression or getattr(task, "compression", None):
        return None
    limits = (conf.task_time_limit, conf.task_soft_time_limit, task.time_limit, task.soft_time_limit)
    if any(limit is not None for limit in limits):
        return None
    return str(conf.task_default_queue)


def publish(task: Any, args: list[Any], argsrepr: str) -> None:
    """``task.apply_async(args=args)`` for a message due now, as a direct ``LPUSH`` when the
    broker allows it (see the module docstring)."""
    # Under task_always_eager (a host's test settings) apply_async runs the task here and now;
    # a direct LPUSH would leave the run pending for a worker that never comes (issue #39). Read
    # on every call, not cached with the queue: tests switch it on and off.
    queue = None if task.app.conf.task_always_eager else _direct.queue_of(task)
    if queue is not None:
        try:
            _direct.redis(task.app).lpush(queue, _envelope(task, queue, args, argsrepr))
            return
        except Exception:  # Celery's path has its own retries and its own errors
            log.warning("direct publish failed; sending through Celery", exc_info=True)
    task.apply_async(args=args, argsrepr=argsrepr, kwargsrepr="{}")


def _envelope(task: Any, queue: str, args: list[Any], argsrepr: str) -> str:
    from celery.utils.nodenames import anon_nodename

    app = task.app
    task_id = str(uuid.uuid4())
    headers, properties, body, _ = app.amqp.as_task_v2(
        task_id,
        task.name,
        args=args,
        kwargs={},
        argsrepr=argsrepr,
        kwargsrepr="{}",
        ignore_result=task.ignore_result,
        origin=anon_nodename(),
        reply_to=app.thread_oid,
    )
    body_text = json.dumps(body)
    properties = dict(properties)
    properties.update(
        delivery_mode=2,
        delivery_info={"exchange": "", "routing_key": queue},
        priority=0,
        body_encoding="base64",
        delivery_tag=str(uuid.uuid4()),
    )
    return json.dumps(
        {
            "body": base64.b64encode(body_text.encode("utf-8")).decode("ascii"),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": properties,
        }
    )
