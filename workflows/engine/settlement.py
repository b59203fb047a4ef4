"""How a command's segment ends, and the history entries every command kind writes on the way.

A leaf of the engine: the segment, the fork/join and call coordinators and the migration
handler all settle commands, and none of them imports another to do it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workflows.engine import db, sql
from workflows.engine.actors import Actor
from workflows.engine.context import DeterministicFailure, Drive, StepLimitExceeded
from workflows.engine.rows import CommandRef, CommandRow
from workflows.models import ActorKind, AttributionStatus, CommandStatus

SQL = sql.load("settlement")

_PLAIN = re.compile(r"^[A-Za-z0-9_.$-]{1,255}$")


# Not a command status: a due date or reminder that met a COMPLETING task goes back to the
# queue, keeping its place and fire time (``segment.settlement``).
REQUEUE = "REQUEUE"


class Settle:
    """How the executing command ends: status and the value-free reason."""

    def __init__(self, status: str, reason: str = "") -> None:
        self.status = status
        self.reason = reason[:4000]
        self.more = False  # the run had other runnable commands when the segment took its lock


def named(name: str) -> str:
    """A name fit for the history (a signal's, a branch's), else ``[unnamed]``."""
    return name if _PLAIN.match(name or "") else "[unnamed]"


def actor_of(row: Mapping[str, Any]) -> Actor:
    """The actor recorded on a command row (or a history row: the same columns)."""
    return Actor(
        kind=row.get("actor_kind") or ActorKind.NONE,
        id=row.get("actor_id") or "",
        reason=row.get("actor_reason") or "",
        on_behalf_of=row.get("on_behalf_of") or "",
        status=row.get("attribution_status") or AttributionStatus.ABSENT,
    )


def received(drive: Drive, cmd: CommandRef, payload: Any = None) -> None:
    drive.history.add(
        "COMMAND_RECEIVED",
        command_id=cmd["id"],
        actor=drive.actor,
        payload={"kind": cmd["kind"], "seq": cmd["seq"], **({"payload": payload} if payload is not None else {})},
    )


def completed(drive: Drive, cmd: CommandRef) -> Settle:
    drive.history.add("COMMAND_COMPLETED", command_id=cmd["id"], actor=drive.actor)
    return Settle(CommandStatus.COMPLETE)


def failure_reason(exc: BaseException) -> str:
    if isinstance(exc, StepLimitExceeded):
        return "STEP_LIMIT: the segment ran more nodes than maxStepsPerSegment"
    if isinstance(exc, DeterministicFailure):
        return exc.reason
    return "DETERMINISTIC_FAILURE: the command failed"


def failure_detail(exc: BaseException) -> dict[str, str] | None:
    """Where and why a deterministic failure happened (``{"step", "field", "reason"}``), the
    payload of its history entry; None when it is not one field's failure."""
    return exc.detail if isinstance(exc, DeterministicFailure) else None


def reopen(cmd: CommandRow) -> None:
    """The task a rejected COMPLETION had reserved is open again."""
    db.execute(SQL.reopen_task, [cmd["task_id"], cmd["id"]])
