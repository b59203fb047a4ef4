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
from workflows.engine import db

LIST_LIMIT = 1000


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
    row = db.fetchone(
        "SELECT count(*) FROM workflow_commands WHERE status IN ('PENDING','CLAIMED') "
        f"AND available_at <= now() {clause}",
        params,
    )
    return int(row[0]) if row else 0


def _list(sql: str, params: list[Any]) -> list[dict[str, Any]]:
    return db.fetchdicts(sql + f" LIMIT {LIST_LIMIT}", params)


def report(run_id: Any = None) -> IdleReport:
    clause, params = _filter(run_id)
    cols = "id, run_id, kind, seq, status, available_at, recorded_at, last_error"
    stuck_after = conf.get().EXECUTOR.STUCK_AFTER_SECONDS
    count = runnable_count(run_id)
    return IdleReport(
        idle=count == 0,
        runnable=count,
        deferred=_list(f"SELECT {cols} FROM workflow_commands WHERE status = 'DEFERRED' {clause} ORDER BY id", params),
        parked=_list(f"SELECT {cols} FROM workflow_commands WHERE status = 'PARKED' {clause} ORDER BY id", params),
        not_yet_available=_list(
            f"SELECT {cols} FROM workflow_commands WHERE status = 'PENDING' AND available_at > now() {clause} "
            "ORDER BY available_at",
            params,
        ),
        stuck=_list(
            f"SELECT {cols} FROM workflow_commands WHERE (status = 'DEAD' OR (status IN ('PENDING','DEFERRED',"
            f"'CLAIMED') AND recorded_at < now() - make_interval(secs => %s))) {clause} ORDER BY id",
            [stuck_after, *params],
        ),
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
