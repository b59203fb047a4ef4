"""Gates the capture tests use to stop a dispatch at a chosen point in another process.

Loaded in the test process and in the Celery worker (through SWITCHYARD_CALLBACK_MODULES,
which tests/capture/conftest.py sets before the worker starts). Both hooks do nothing unless
the test created a gate file named after the record: ``<gates>/claimed-<pk>`` holds a
dispatch right after its claim (no effect marker yet), ``<gates>/effect-<pk>`` holds it inside
a dispatch effect, after the effect's marker committed. A held dispatch touches
``<gate>.entered`` and waits (at most a minute) until the test removes the gate.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from capture import effects, signals

GATES = Path(os.environ.setdefault("SWITCHYARD_CAPTURE_GATES", tempfile.mkdtemp(prefix="capture-gates-")))


def gate(kind: str, pk: Any) -> Path:
    return GATES / f"{kind}-{pk}"


def _hold(path: Path) -> None:
    if not path.exists():
        return
    path.with_suffix(".entered").touch()
    deadline = time.monotonic() + 60
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _hold_after_claim(sender: Any, capture_id: int, **kwargs: Any) -> None:
    from capture.models import Capture

    found = Capture.objects.filter(pk=capture_id).values_list("object_pk", flat=True).first()
    if found is not None:
        _hold(gate("claimed", found))


signals.capture_claimed.connect(_hold_after_claim, weak=False, dispatch_uid="tests-capture-hold-after-claim")


@effects.register(
    "demo.PurchaseOrder",
    on=("created",),
    name="tests.notify_gated",
    when=lambda event: gate("effect", event.object_pk).exists(),
    fields=("number",),
)
def notify_gated(event: effects.CapturedEvent) -> None:
    """An effect that stands for a call to another system, held while its gate exists."""
    _hold(gate("effect", event.object_pk))
