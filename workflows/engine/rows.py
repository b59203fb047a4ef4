"""The rows the engine passes around: a run, a command, a run's wait.

The engine reads runs and commands with raw SQL and hands the rows on as dicts; these
TypedDicts say which keys those dicts hold, so a misspelt key is a type error rather than a
``KeyError`` in a segment. The column lists the statements select are built from them, so a
column is named in one place: a statement text names ``{run_columns}`` or ``{command_columns}``
and ``with_columns`` fills them in once, at import (the text stays one ``str`` per process).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict
from uuid import UUID


class WaitRow(TypedDict, total=False):
    """``run["wait"]`` (and a branch's): what the run is parked on, as the nodes wrote it."""

    kind: str  # signal, task, timer, call, join
    step: str
    park: int | None  # the open park row
    signals: list[str]  # a signal wait's names
    timeout: int  # a signal wait's timeout timer
    fire: int  # a timer node's timer
    timers: list[int]  # a task's due date and reminders
    task: str  # a task wait's task
    child: str  # a call wait's child run
    fork: str  # a join's fork


class RunRow(TypedDict):
    """A ``workflow_runs`` row as ``locks`` reads it (``RUN_COLUMNS``)."""

    id: UUID
    scope: str
    definition_id: str
    version: int
    plan_hash: str
    start_scope: str
    status: str
    state: Any
    state_version: int
    current_step: str
    wait: WaitRow | None
    subject_type: str
    subject_id: str
    subject_version: Any
    business_key: str | None
    context: Any
    failure_code: str
    failure_message: str
    parent_run_id: UUID | None
    parent_step: str
    parent_branch: str
    call_depth: int
    compensation: Any
    next_seq: int
    open_signals: int
    history_seq: int
    cancel_reason: str
    created_at: datetime
    ended_at: datetime | None
    actor_kind: str
    actor_id: str
    actor_reason: str
    on_behalf_of: str
    attribution_status: str


class RunQueue(TypedDict):
    """What queuing a command or a timer reads and counts on a run: a locked ``RunRow``, or
    the counters of a run inserted in the same statement as its START."""

    id: Any
    next_seq: int
    open_signals: int


class RunLink(TypedDict):
    """A run's place in a call chain (``teardown.waiting_callers``): a ``RunRow``, or just the
    called run's id and its caller's."""

    id: Any
    parent_run_id: Any


class CommandRef(TypedDict):
    """What a command's history entries name (``settlement.received``): a ``CommandRow``, or
    a command built in memory (a bulk migration's MIGRATION)."""

    id: int
    kind: str
    seq: int


class CommandRow(TypedDict):
    """A ``workflow_commands`` row as a segment reads it (``COMMAND_COLUMNS``), and what the
    segment's lock adds to a claimed command (the keys starting with ``_``)."""

    id: int
    run_id: UUID
    seq: int
    kind: str
    timer_kind: str | None
    status: str
    payload: Any
    target: Any
    task_id: UUID | None
    timer_id: int | None
    attempts: int
    recorded_at: datetime
    fire_at: datetime | None
    token: UUID | None
    actor_kind: str
    actor_id: str
    actor_reason: str
    on_behalf_of: str
    attribution_status: str
    reconcile_action: str
    _more: NotRequired[bool]  # other runnable commands of the run were queued under the lock
    _task: NotRequired[dict[str, Any] | None]  # a COMPLETION's task, locked after the run
    _open_beside: NotRequired[dict[str, Any] | None]  # what the run holds beside that task


def _columns(row: type) -> str:
    return ", ".join(name for name in row.__annotations__ if not name.startswith("_"))


RUN_COLUMNS = _columns(RunRow)
COMMAND_COLUMNS = _columns(CommandRow)


def with_columns(text: str) -> str:
    """A statement text with its ``{run_columns}`` / ``{command_columns}`` filled in."""
    return text.replace("{run_columns}", RUN_COLUMNS).replace("{command_columns}", COMMAND_COLUMNS)
