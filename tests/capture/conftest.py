"""Capture test helpers: deploy documents, dispatch in-process, and the worker's settings.

Before any worker starts: a 3-second capture lease (so crash recovery takes seconds, not the
production 300) and the gates of ``tests.support.capture_callbacks`` in the worker too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

os.environ.setdefault("WORKFLOWS_CAPTURE_LEASE_SECONDS", "3")
# The engine tests' callbacks stay loaded when both suites share one worker.
_modules = [m for m in os.environ.get("SWITCHYARD_CALLBACK_MODULES", "").split(",") if m]
for _module in ("tests.support.engine_callbacks", "tests.support.capture_callbacks"):
    if _module not in _modules:
        _modules.append(_module)
os.environ["SWITCHYARD_CALLBACK_MODULES"] = ",".join(_modules)
import tests.support.capture_callbacks  # noqa: E402,F401  (same registrations in this process)

REVIEW = (
    __import__("pathlib").Path(__file__).resolve().parents[2] / "demo" / "workflows" / "purchase-order-review.yaml"
).read_text()


@pytest.fixture
def deploy(db: None) -> Callable[..., Any]:
    """Load, publish and activate a document in the default scope; the registry is re-read."""
    from capture import triggers
    from workflows import definitions

    def _deploy(text: str = REVIEW) -> Any:
        ref = definitions.load(scope="default", text=text, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        definitions.activate(
            scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
        )
        triggers.refresh()
        return ref

    return _deploy


@pytest.fixture
def no_messages(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Keep dispatch messages in a list instead of the broker (in-process tests)."""
    from capture import recording

    sent: list[int] = []
    monkeypatch.setattr(recording, "send", lambda capture_id, countdown=None: sent.append(capture_id))
    return sent
