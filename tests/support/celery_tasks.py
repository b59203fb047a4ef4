"""Tasks only the test suite's worker imports (``celery worker --include``).

They let infrastructure tests prove that the worker consumes the real broker and writes to
the database pytest-django created, without depending on the engine's tasks.
"""

from __future__ import annotations

import time
from decimal import Decimal

from celery import shared_task


@shared_task(name="tests.create_purchase_order")
def create_purchase_order(number: str, sleep_seconds: float = 0.0) -> None:
    from demo.models import PurchaseOrder

    if sleep_seconds:
        time.sleep(sleep_seconds)
    PurchaseOrder.objects.get_or_create(number=number, defaults={"requester": "worker", "total": Decimal("1.00")})
