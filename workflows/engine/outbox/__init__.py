"""The outbox: side effects a segment decided on, recorded in its transaction and delivered
after commit (at least once; receivers get an idempotency key).

- ``recording``: the intents written with the segment (service calls, compensations, task
  notices, resumes of a caller);
- ``delivery``: the claim, the delivery and the retry, and the delivered marks a worker
  carries.

``delivery`` imports from ``recording``, never the other way; this package re-exports what
callers use (``from workflows.engine import outbox; outbox.deliver(...)``).
"""

from workflows.engine.outbox.delivery import (
    deliver,
    deliver_claimed,
    due_intents,
    enable_carried_marks,
    flush_marks,
    intents_to_send,
    restore_marks,
    take_marks,
)
from workflows.engine.outbox.recording import (
    compensate,
    notice_recorded,
    notice_statement,
    notify_task,
    recipients_statement,
    record,
    resume_parent,
)

__all__ = [
    "compensate",
    "deliver",
    "deliver_claimed",
    "due_intents",
    "enable_carried_marks",
    "flush_marks",
    "intents_to_send",
    "notice_recorded",
    "notice_statement",
    "notify_task",
    "recipients_statement",
    "record",
    "restore_marks",
    "resume_parent",
    "take_marks",
]
