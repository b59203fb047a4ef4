"""Events out: Django signals for the transitions of runs and tasks (the public contract).

Each signal is sent once per transition, after the transaction that recorded it committed
(``transaction.on_commit``): a receiver never sees a transition that rolled back, and a
receiver that fails cannot undo it (Django's ``send_robust``: its error is logged). The
engine records the event where it writes the transition's history entry
(``workflows/engine/events.py``), and the same event goes to the webhook subscriptions
(``docs/api.md``, "Events and webhooks").

Receivers get ``event`` (an :class:`Event`) as a keyword argument; ``sender`` is the
:class:`Event` class. The payload is stable and carries no state values::

    from django.dispatch import receiver
    from workflows import signals

    @receiver(signals.run_completed)
    def on_completed(sender, event, **kwargs):
        print(event.id, event.type, event.run_id, event.business_key)

``event.id`` is unique and stable (derived from the run and the history entry's position), so
a receiver that may see an event twice (a webhook retried, a redelivery) can deduplicate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.dispatch import Signal

RUN_STARTED = "run.started"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
RUN_MIGRATED = "run.migrated"
TASK_CREATED = "task.created"
TASK_COMPLETED = "task.completed"
TASK_EXPIRED = "task.expired"

EVENT_TYPES: tuple[str, ...] = (
    RUN_STARTED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_CANCELLED,
    RUN_MIGRATED,
    TASK_CREATED,
    TASK_COMPLETED,
    TASK_EXPIRED,
)

run_started = Signal()
run_completed = Signal()
run_failed = Signal()
run_cancelled = Signal()
run_migrated = Signal()
task_created = Signal()
task_completed = Signal()
task_expired = Signal()
# every event, whatever its type (a receiver that forwards all of them)
workflow_event = Signal()

SIGNALS: dict[str, Signal] = {
    RUN_STARTED: run_started,
    RUN_COMPLETED: run_completed,
    RUN_FAILED: run_failed,
    RUN_CANCELLED: run_cancelled,
    RUN_MIGRATED: run_migrated,
    TASK_CREATED: task_created,
    TASK_COMPLETED: task_completed,
    TASK_EXPIRED: task_expired,
}


@dataclass(frozen=True)
class Event:
    """One transition. ``step`` is where it happened; ``task_id`` is set for task events;
    ``outcome`` is a framework code (a failed run's reason code, a completed task's decision
    name), never a payload or state value."""

    id: str
    type: str
    occurred_at: datetime
    run_id: str
    scope: str
    definition_id: str
    definition_version: int | None
    business_key: str | None
    step: str = ""
    task_id: str | None = None
    outcome: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The payload a webhook receives (JSON; ``occurred_at`` in ISO 8601)."""
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "scope": self.scope,
            "definition_id": self.definition_id,
            "definition_version": self.definition_version,
            "business_key": self.business_key,
            "step": self.step,
        }
        if self.task_id is not None:
            data["task_id"] = self.task_id
        if self.outcome:
            data["outcome"] = self.outcome
        return {"id": self.id, "type": self.type, "occurred_at": self.occurred_at.isoformat(), "data": data}


def send(event: Event) -> None:
    """Send ``event`` to the receivers of its type and of ``workflow_event`` (robustly: a
    receiver's error is logged by Django and stops no other receiver)."""
    SIGNALS[event.type].send_robust(sender=Event, event=event)
    workflow_event.send_robust(sender=Event, event=event)
