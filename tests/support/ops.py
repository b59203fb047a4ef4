"""Arranging what operators must see: dead letters, OUTCOME_UNKNOWN commands, long waits.

Each helper drives the executor's own steps (claim, lease expiry, the sweep's recovery) the
way a crashing worker would, as tests/engine/test_recording_and_executor.py::TestRecovery and
tests/engine/test_effects.py do; only ages are moved back in the database.
"""

from __future__ import annotations

from typing import Any

from tests.engine import documents
from workflows import conf
from workflows.engine import db, effects, executor

# order-signal (service, then a payment wait with a one-hour timeout), its service a no-op
ORDER = documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")

# An email first: its effect marker lets a crash leave the START OUTCOME_UNKNOWN.
EMAILER = """
definitionId: emailer
definitionVersion: 1
contract: {name: emailer.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: notify
steps:
  - id: notify
    type: email
    to: "state.email"
    subject: "Order received"
    body: "We got your order."
    next: done
  - id: done
    type: complete
"""


def _expire(command_id: int) -> None:
    db.execute("UPDATE workflow_commands SET lease_until = now() - interval '1 second' WHERE id = %s", [command_id])
    assert executor.recover_expired_leases() == 1


def dead_letter_next_command(run_id: Any) -> int:
    """The run's next command keeps dying mid-segment (its claim lapses, the attempt stays
    spent) until the executor dead-letters it. Answers the command id."""
    attempts = conf.get().EXECUTOR.MAX_ATTEMPTS
    head = executor.peek(10, run_id)[0]
    for _ in range(attempts):
        head = executor.peek(10, run_id)[0]
        assert executor.claim(head, lease_seconds=30, max_attempts=attempts)
        _expire(head.id)
    executor.drain(run_id=run_id, budget_seconds=10)
    return head.id


def outcome_unknown_next_command(run_id: Any, *, step: str = "notify") -> int:
    """The worker running the run's next command dies after its effect marker committed:
    the sweep finds the lapsed claim with a marker and settles it OUTCOME_UNKNOWN."""
    head = executor.peek(10, run_id)[0]
    token = executor.claim(head, lease_seconds=30, max_attempts=conf.get().EXECUTOR.MAX_ATTEMPTS)
    assert token
    effects.mark_started(command_id=head.id, run_id=run_id, token=token, step=step)
    _expire(head.id)
    marker_connection = getattr(effects._local, "conn", None)
    if marker_connection is not None:  # the "dead" worker's second connection goes with it
        marker_connection.close()
    return head.id


def age_open_park(run_id: Any, *, seconds: float) -> None:
    """The run's open wait began ``seconds`` ago."""
    db.execute(
        "UPDATE workflow_parks SET since = now() - make_interval(secs => %s) WHERE run_id = %s AND left_at IS NULL",
        [seconds, run_id],
    )


def make_overdue(run_id: Any, *, seconds: float = 3600) -> None:
    """The run's open task was due ``seconds`` ago."""
    db.execute(
        "UPDATE workflow_tasks SET due_at = now() - make_interval(secs => %s) WHERE run_id = %s AND status = 'OPEN'",
        [seconds, run_id],
    )


def closed_waits(*, definition_id: str, node: str, seconds: list[float], version: int = 1) -> None:
    """History for the percentile: waits at a position that ended on their own."""
    for i, wait in enumerate(seconds):
        db.execute(
            "INSERT INTO workflow_parks (run_id, scope, definition_id, version, node, kind, branch_id, since, left_at, "
            "left_how, moved_to_scope, moved_to_node, moved_by) SELECT id, 'default', %s, %s, %s, 'SIGNAL', '', "
            "now() - make_interval(secs => %s + %s), now() - make_interval(secs => %s), 'signal', '', '', '' "
            "FROM workflow_runs ORDER BY created_at LIMIT 1",
            [definition_id, version, node, wait, i, i],
        )


def make_due(run_id: Any, timer_kind: str) -> None:
    """Move a run's timer into the past (the database clock decides what is due)."""
    db.execute(
        "UPDATE workflow_commands SET fire_at = now() - interval '1 second', order_at = now() - interval '1 second', "
        "available_at = now() - interval '1 second' WHERE run_id = %s AND kind = 'TIMER' AND timer_kind = %s "
        "AND status = 'PENDING'",
        [run_id, timer_kind],
    )
    db.execute(
        "UPDATE workflow_timers SET fire_at = now() - interval '1 second' WHERE run_id = %s AND kind = %s "
        "AND status = 'SCHEDULED'",
        [run_id, timer_kind],
    )
