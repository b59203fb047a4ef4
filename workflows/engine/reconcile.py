"""Administrative decisions the executor never takes on its own.

- **Reconcile** an ``OUTCOME_UNKNOWN`` command: a segment was interrupted after its effect
  marker committed, so the email/agent/script effect may or may not have happened. An
  administrator checks the outside world and decides: ``replay`` offers the command again
  (the effect runs again), ``resolve`` offers it again with the marked step recorded as done
  (``target.resolved_step``; the segment skips that effect and logs EFFECT_RESOLVED). Who,
  when and why stay on the command; the history gets COMMAND_RECONCILED.
- **Confirmed cancel**: the cancel-run confirmation carries what the operator saw (state
  version, history sequence); under the run's lock the run is checked for having moved on
  since, and left alone if it has.

Both run in the caller's transaction under the run's execution lock (run row before its
command rows, the lock order of ``locks.py``).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from workflows.engine import db, locks, recording, sql, teardown, wakeups
from workflows.engine.actors import Actor
from workflows.engine.context import Drive
from workflows.engine.recording import Recorded
from workflows.engine.rows import RunRow
from workflows.exceptions import (
    AlreadyMovedOn,
    CommandNotFound,
    CommandNotReconcilable,
    InvalidPayload,
    SignalRejected,
    Violation,
)
from workflows.models import ENDED_STATUSES, CommandKind, CommandStatus, RunStatus

ACTIONS = ("replay", "resolve")
REASON_LIMIT = 1000
SQL = sql.load("reconcile")


def clean_reason(reason: Any) -> str:
    """Control and format characters dropped, whitespace folded, cut at 1000 characters."""
    text = "".join(
        " " if ch in "\r\n\t" else ch
        for ch in str(reason or "")
        if ch in "\r\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp")
    )
    return " ".join(text.split())[:REASON_LIMIT]


def reconcile_command(*, command_id: Any, action: str, reason: str, actor: Actor) -> Recorded:
    """Put an OUTCOME_UNKNOWN command back to PENDING (attempts reset), to replay or resolve.

    Refuses: INVALID_PAYLOAD (unknown action, blank reason), COMMAND_NOT_FOUND,
    COMMAND_NOT_RECONCILABLE (not OUTCOME_UNKNOWN; resolve without an effect marker or of a
    SIGNAL, whose segment does not honour a resolved step), LOCK_TIMEOUT.
    """
    if action not in ACTIONS:
        raise InvalidPayload(
            "action must be replay or resolve",
            violations=[Violation(pointer="/action", type="enum", message="replay or resolve")],
        )
    reason = clean_reason(reason)
    if not reason:
        raise InvalidPayload(
            "a reason is required",
            violations=[Violation(pointer="/reason", type="required", message="a reason is required")],
        )
    try:
        found = db.fetchdict(SQL.command_run, [int(command_id)])
    except (TypeError, ValueError):
        found = None
    if found is None:
        raise CommandNotFound("command not found")
    run = locks.lock_run(found["run_id"])
    cmd = db.fetchdict(SQL.command_locked, [found["id"]])
    assert cmd is not None
    if cmd["status"] != CommandStatus.OUTCOME_UNKNOWN:
        raise CommandNotReconcilable(f"command {cmd['id']} is {cmd['status']}, not OUTCOME_UNKNOWN")
    marker = db.fetchdict(SQL.last_marker, [cmd["id"]])
    target = dict(cmd["target"] or {})
    target.pop("resolved_step", None)
    if action == "resolve":
        if marker is None:
            raise CommandNotReconcilable(f"command {cmd['id']} has no effect marker to resolve")
        if cmd["kind"] == CommandKind.SIGNAL:
            raise CommandNotReconcilable(f"command {cmd['id']} is a SIGNAL: resolve is not available, replay it")
        target["resolved_step"] = marker["step"]
    who = actor.id or actor.reason or actor.kind
    db.execute(
        SQL.requeue,
        [db.jsonb(target) if target else None, action, who[:255], reason, cmd["id"]],
    )
    drive = Drive.for_run(run, None, actor)
    drive.history.add(
        "COMMAND_RECONCILED",
        command_id=cmd["id"],
        step=marker["step"] if marker else "",
        outcome=action.upper(),
        actor=actor,
        payload={"action": action, "reason": reason},
    )
    drive.save()
    wakeups.wake(run["id"])
    return Recorded(str(run["id"]), cmd["id"], cmd["kind"], CommandStatus.PENDING, cmd["seq"])


def moved_on(run: RunRow, *, seen_state_version: int, seen_history_seq: int) -> bool:
    """Whether a locked run went on since an operator saw it: it no longer waits, its state
    changed, or it took a step (a DECISION was logged) after the history they saw.

    Entries that do not move a run (a reminder, a reassignment, a parked signal) do not count.
    """
    if run["status"] != RunStatus.WAITING or int(run["state_version"]) != int(seen_state_version):
        return True
    if int(run["history_seq"]) == int(seen_history_seq):
        return False
    stepped = db.fetchone(SQL.stepped_since, [run["id"], int(seen_history_seq)])
    return stepped is not None


def cancel_confirmed(*, run_id: Any, seen_state_version: int, seen_history_seq: int, reason: str, actor: Actor) -> None:
    """Cancel a waiting run unless it moved on since the confirmation was shown.

    Refuses: INSTANCE_NOT_FOUND, ALREADY_MOVED_ON (resumed, or ended, in the meantime),
    LOCK_TIMEOUT. The lock taken for the check is held through the teardown.
    """
    teardown.lock_callers(run_id)  # lock order caller → child (the cancel reaches its callers)
    run = locks.lock_run(run_id)
    if run["status"] in ENDED_STATUSES or moved_on(
        run, seen_state_version=seen_state_version, seen_history_seq=seen_history_seq
    ):
        raise AlreadyMovedOn(f"run {run_id} has moved on since the confirmation was shown; it was left alone")
    try:
        recording.cancel(run_id=run_id, reason=reason, actor=actor)
    except SignalRejected:
        raise AlreadyMovedOn(f"run {run_id} has ended; it was left alone") from None
