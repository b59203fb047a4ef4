"""Entering and leaving waits: the run's ``wait``, its park row and the wait's timers."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

from django.db import connection

from workflows.engine import commands, db, pipeline, sql, teardown, wakeups
from workflows.engine.context import Drive
from workflows.engine.rows import WaitRow
from workflows.models import RunStatus

SQL = sql.load("waits")


def park_statement(
    drive: Drive, *, node: str, kind: str, branch_id: str = "", park_id: int | None = None
) -> tuple[str, list[Any]]:
    """The insert of a park row (answers its id), for a caller that batches it with others;
    with ``park_id`` (one of ``drawn_park_id``) the row takes that id and answers nothing."""
    run = drive.run
    params = [run["id"], run["scope"], run["definition_id"], run["version"], node, kind, branch_id]
    if park_id is not None:
        return SQL.open_park_drawn, [park_id, *params]
    return SQL.open_park, params


# Park ids drawn ahead from the parks' own sequence, a block at a time, for this process: a
# park whose id is known before its insert needs no answer, so a waiting node's writes can
# travel with the segment's settlement (``pipeline.defer``) instead of a round trip of their own.
# An id is used once or lost (a rolled-back insert leaves a gap, as the sequence would). The
# block belongs to this process and database: a forked child, or a connection to another
# database, draws its own.
PARK_IDS_PER_DRAW = 64
_drawn: dict[str, Any] = {"owner": None, "ids": deque()}


def _owner() -> tuple[Any, ...]:
    s = connection.settings_dict
    return (os.getpid(), s.get("HOST"), s.get("PORT"), s.get("NAME"))


def drawn_park_id() -> int | None:
    """A park id drawn ahead for this process, or None when none is left (``draw_statement``)."""
    ids: deque[int] = _drawn["ids"]
    if not ids or _drawn["owner"] != _owner():
        return None
    try:
        return ids.popleft()
    except IndexError:
        return None


def draw_statement() -> tuple[str, list[Any]] | None:
    """The statement that draws the next block when this process has none left (its row goes
    to ``drawn``), else None."""
    if _drawn["ids"] and _drawn["owner"] == _owner():
        return None
    return SQL.draw_park_ids, [PARK_IDS_PER_DRAW]


def drawn(row: tuple[Any, ...] | None) -> None:
    """Keep the block a ``draw_statement`` answered."""
    if row is not None and row[0]:
        owner = _owner()
        if _drawn["owner"] != owner:
            _drawn["owner"], _drawn["ids"] = owner, deque()
        _drawn["ids"].extend(int(i) for i in row[0])


def open_park(drive: Drive, *, node: str, kind: str, branch_id: str = "") -> int:
    row = db.fetchone(*park_statement(drive, node=node, kind=kind, branch_id=branch_id), prepared=True)
    assert row is not None
    return int(row[0])


def close_park_statement(park_id: int | None, how: str, **moved: Any) -> tuple[str, list[Any]] | None:
    if not park_id:
        return None
    return SQL.close_park, [
        how,
        moved.get("version"),
        moved.get("scope", ""),
        moved.get("node", ""),
        moved.get("by", ""),
        moved.get("migration_id"),
        park_id,
    ]


def close_park(park_id: int | None, how: str, **moved: Any) -> None:
    statement = close_park_statement(park_id, how, **moved)
    if statement is not None:
        db.execute(*statement, prepared=True)


def enter(
    drive: Drive, *, step: str, kind: str, park_kind: str, outcome: str, park_id: int | None = None, **details: Any
) -> WaitRow:
    """Enter a wait: its park (``park_id`` when the caller inserted it already), the run's
    ``wait`` and the decision that logs it."""
    wait = cast(WaitRow, {"kind": kind, "step": step, **details})
    wait["park"] = (
        park_id if park_id is not None else open_park(drive, node=step, kind=park_kind, branch_id=drive.branch_id)
    )
    drive.run["status"] = RunStatus.WAITING
    drive.run["current_step"] = step
    drive.run["wait"] = wait
    drive.decide(step=step, outcome=outcome)
    return wait


def timer_added(drive: Drive, wait: WaitRow, timer: dict[str, Any]) -> dict[str, Any]:
    """A timer inserted for this wait: listed on it, and a wake-up asked for its fire time."""
    wait.setdefault("timers", []).append(timer["timer_id"])
    wakeups.wake(drive.run["id"], timer["fire_at"])
    return timer


def leave(
    drive: Drive,
    how: str,
    *,
    keep_timer: int | None = None,
    along: Sequence[tuple[str, Any]] = (),
    read_open_things: bool = False,
) -> WaitRow | None:
    """Leave the current wait: close its park and cancel its timers (except the one firing).
    ``along``: the caller's own writes on other tables, in the same statement as the park's.
    ``read_open_things``: the caller goes straight on to end the run; what the run still holds
    (``teardown.SQL.open_things``) is read in the same round trip, after the writes, and kept for
    ``teardown.end_run`` (``drive.open_things``) — unless timers are still to be cancelled.
    A COMPLETION read it with the run's lock (``drive.open_things_beside``: all but the park
    and the task its writes close): the writes then travel with the segment's next statement
    (``pipeline.defer``)."""
    wait = drive.run.get("wait")
    park = close_park_statement(wait.get("park"), how) if wait else None
    statements = ([park] if park is not None else []) + list(along)
    timer_ids = [t for t in (wait or {}).get("timers", []) if t != keep_timer]
    if len(statements) > 1:
        statements = [db.fused(statements)]
    beside, drive.open_things_beside = drive.open_things_beside, None
    if statements and read_open_things and not timer_ids and beside is not None:
        drive.open_things = beside
        pipeline.defer(statements[0][0], statements[0][1], _sent)
    elif statements and read_open_things and not timer_ids:
        read = (teardown.SQL.open_things, {"r": drive.run["id"]})
        drive.open_things = pipeline.fetchdict_batch([*statements, read])[-1]
    elif statements:
        pipeline.execute_batch(statements)
    if not wait:
        return None
    if timer_ids:
        cancelled = commands.cancel_timers(drive.run["id"], timer_ids=timer_ids)
        for t in cancelled:
            drive.history.add("TIMER_CANCELLED", step=t["step"], command_id=t["command_id"], actor=drive.actor)
    drive.run["wait"] = None
    drive.run["status"] = RunStatus.RUNNING
    return wait


def _sent(_row: tuple[Any, ...] | None) -> None:
    """A deferred write nobody reads the answer of."""


def close_branch_wait(drive: Drive, wait: WaitRow | None, how: str) -> None:
    """Close a (non-current) branch wait: its park and its timers."""
    if not wait:
        return
    close_park(wait.get("park"), how)
    timer_ids = list(wait.get("timers", []))
    if timer_ids:
        for t in commands.cancel_timers(drive.run["id"], timer_ids=timer_ids):
            drive.history.add(
                "TIMER_CANCELLED",
                step=t["step"],
                branch_id=t["branch_id"],
                command_id=t["command_id"],
                actor=drive.actor,
            )
