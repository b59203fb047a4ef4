"""Engine test helpers: deploy a document (load → publish → activate) and drive the executor
in-process (the same code the Celery tasks run), so engine behaviour is tested without a
broker; the e2e suite runs the same flows through a real worker."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from workflows.engine import executor

# Before any worker starts: the worker imports the test callbacks (its short lease is set for
# the whole suite in tests/conftest.py).
os.environ.setdefault("SWITCHYARD_CALLBACK_MODULES", "tests.support.engine_callbacks")
import tests.support.engine_callbacks  # noqa: F401  (same registrations in this process)


@pytest.fixture
def deploy(db: None) -> Callable[..., Any]:
    from workflows import definitions

    def _deploy(text: str, *, scope: str = "default", activate: bool = True) -> Any:
        ref = definitions.load(scope=scope, text=text, format="yaml")
        definitions.publish(scope=scope, definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(scope=scope, definition_id=ref.definition_id, version=ref.version, target_scope=scope)
        return ref

    return _deploy


@pytest.fixture
def drawn_park_ids(db: None) -> None:
    """This process holds a fresh block of park ids drawn ahead (as a worker does after its
    first human task), so a human task's writes can travel with the settlement."""
    from workflows.engine import db as engine_db
    from workflows.engine import waits

    waits._drawn["ids"].clear()
    statement = waits.draw_statement()
    assert statement is not None
    waits.drawn(engine_db.fetchone(*statement))


@pytest.fixture
def drain() -> Callable[..., int]:
    def _drain(run_id: Any = None) -> int:
        return executor.drain(run_id=run_id, budget_seconds=10)

    return _drain
