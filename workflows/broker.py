"""kombu's Redis transport with one client for its synchronous commands.

kombu builds a new ``redis.Redis`` client for every publish (``Channel._create_client``);
building one fills a table of about 170 response callbacks, which cost more CPU than the
``LPUSH`` it then sends — about a third of a wake-up's publish. The client is only a
front for the channel's connection pool and is safe to share between threads, so this
channel keeps one per pool (a pool rebuilt after a fork or a reconnect gets a new client).
Everything else is kombu's. A host selects it for a ``redis://`` broker with
``CELERY_BROKER_TRANSPORT = "workflows.broker:Transport"`` (optional: without it the engine
still publishes its wake-ups directly, see workflows.publish).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool = self.pool
        client = self._sync_client
        if client is None or client.connection_pool is not pool:
            client = self._sync_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
