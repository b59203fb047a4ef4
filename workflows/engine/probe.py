"""The execution probe: wait until recorded work has run (``await_idle``).

Polls the number of runnable commands (unsettled and available now) of one run or of all,
pausing 25 ms after the first read and longer after each following one, up to 250 ms. A
timeout beyond ten minutes is shortened to ten minutes. The report lists (≤ 1000 each)
the deferred, parked, not-yet-available and stuck commands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from workflows import conf
from workflows.engine import db, sql

LIST_LIMIT = 1000
SQL = sql.load("probe")


@dataclass
class IdleReport:
    idle: bool
    runnable: int
    deferred: list[dict[str, Any]] = field(default_factory=list)
    parked: list[dict[str, Any]] = field(default_factory=list)
    not_yet_available: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[dict[str, Any]] = field(default_factory=list)


def _filter(run_id: Any) -> tuple[str, list[Any]]:
    return ("AND run_id = %s", [run_id]) if run_id is not None else ("", [])


def runnable_count(run_id: Any = None) -> int:
    clause, params = _filter(run_id)
    row = db.fetchone(SQL.runnable_count.format(run_filter=clause), params)
    return int(row[0]) if row else 0


def _list(statement: str, clause: str, params: list[Any]) -> list[dict[str, Any]]:
    return db.fetchdicts(statement.format(run_filter=clause) + f" LIMIT {LIST_LIMIT}", params)


def report(run_id: Any = None) -> IdleReport:
    clause, params = _filter(run_id)
    stuck_after = conf.get().EXECUTOR.STUCK_AFTER_SECONDS
    count = runnable_count(run_id)
    return IdleReport(
        idle=count == 0,
        runnable=count,
        deferred=_list(SQL.deferred, clause, params),
        parked=_list(SQL.parked, clause, params),
        not_yet_available=_list(SQL.not_yet_available, clause, params),
        stuck=_list(SQL.stuck, clause, [stuck_after, *params]),
    )


def await_idle(timeout: float = 30.0, run_id: Any = None) -> IdleReport:
    """Wait (polling the database) until nothing is runnable, or the timeout; answer the report."""
    timeout = min(float(timeout), 600.0)
    stop = time.monotonic() + timeout
    pause = 0.025
    first = True
    while True:
        if runnable_count(run_id) == 0:
            return report(run_id)
        if time.monotonic() >= stop:
            return report(run_id)
        time.sleep(pause if first else min(pause, max(0.0, stop - time.monotonic())))
        first = False
        pause = min(0.25, pause * 1.6)
