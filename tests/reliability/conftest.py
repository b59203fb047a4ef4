"""Helpers of the reliability suites: deploy a document, drive the executor in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import tests.reliability.callbacks  # noqa: F401  (rel.effect, used by the workload document)


@pytest.fixture
def deploy(db: None) -> Callable[..., Any]:
    from workflows import definitions

    def _deploy(text: str, *, scope: str = "default") -> Any:
        ref = definitions.load(scope=scope, text=text, format="yaml")
        definitions.publish(scope=scope, definition_id=ref.definition_id, version=ref.version)
        definitions.activate(scope=scope, definition_id=ref.definition_id, version=ref.version, target_scope=scope)
        return ref

    return _deploy


@pytest.fixture
def drain() -> Callable[..., int]:
    from workflows.engine import executor

    def _drain(run_id: Any = None) -> int:
        return executor.drain(run_id=run_id, budget_seconds=10)

    return _drain
