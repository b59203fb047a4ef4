"""Callbacks of the reliability workload, registered in the test process and in every worker
(through ``SWITCHYARD_CALLBACK_MODULES=tests.reliability.callbacks``).

``rel.effect`` is the receiving application of the workload's service steps. Delivery is at
least once, so it does what a receiver must: it keeps every delivery it was handed
(``reliability_deliveries``) and applies the effect once per idempotency key
(``reliability_effects``, unique key). The invariants then compare both tables with the
outbox: every intent applied exactly once, duplicates only among the deliveries.
"""

from __future__ import annotations

import os
from typing import Any

from django.db import connection, transaction

from workflows.definitions import catalogs

TABLES = (
    "CREATE TABLE IF NOT EXISTS reliability_deliveries (id bigserial PRIMARY KEY, key text NOT NULL, "
    "header_key text NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
    "CREATE TABLE IF NOT EXISTS reliability_effects (key text PRIMARY KEY, pid integer NOT NULL, "
    "at timestamptz NOT NULL DEFAULT clock_timestamp())",
)


def create_tables() -> None:
    with connection.cursor() as cur:
        for statement in TABLES:
            cur.execute(statement)
        cur.execute("TRUNCATE reliability_deliveries, reliability_effects")


def drop_tables() -> None:
    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS reliability_deliveries, reliability_effects")


@catalogs.callbacks.register("rel.effect", category="service")
def effect(payload: Any, headers: dict[str, str], idempotency_key: str) -> None:
    """Keep the delivery; apply the effect once per key (what an at-least-once receiver does)."""
    header_key = str((headers or {}).get("idempotency-key", ""))
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "INSERT INTO reliability_deliveries (key, header_key, pid) VALUES (%s, %s, %s)",
            [idempotency_key, header_key, os.getpid()],
        )
        cur.execute(
            "INSERT INTO reliability_effects (key, pid) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
            [header_key or idempotency_key, os.getpid()],
        )
