"""Migration notices: no second e-mail for an approval that only changed graphs.

A migration's move withdraws a run's approval and opens the target node's afresh. When the
new approval goes to the same assignees as the one withdrawn (the same assignment: the same
user, or the same group), mailing them "New task" again says nothing new — one walk of a
backlog once sent 931 of them. Such an approval notifies nobody. A migration record may ask
instead (``notify_digest``; ``WORKFLOWS["MIGRATE"]["DIGEST_NOTICES"]`` is the default) for
ONE digest per such assignee: "N of your tasks moved to revision X".

The digest is an outbox intent (kind DIGEST) whose idempotency key is the migration's and
the assignee's: the first move that keeps an assignee records it, every later one adds to its
count in its own transaction (the MIGRATION segment's or Apply's set-based batch), so a
repeated Celery message, a re-run batch or a segment that rolled back never adds a second
digest or a wrong count. Delivery waits until nothing of the migration is left to apply
(postponed without spending an attempt) and sends one message to the assignment's addresses.

An assignee the move did not take the approval from is notified as for any new task.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from workflows.engine import db, pipeline, sql

SQL = sql.load("outbox_digest")

# a digest is first looked at this long after its first move, then again every RECHECK while
# its migration still has runs to apply (the sweep delivers due intents every 2 s)
FIRST_LOOK_SECONDS = 1
RECHECK_SECONDS = 5


@dataclass(frozen=True)
class Moved:
    """A migration move in progress: who held the approvals it withdrew, and what to send
    those of them it gives a new approval (``Drive.moved``)."""

    assignees: frozenset[tuple[str, str]]
    digest: bool
    migration_id: int | None
    definition_id: str
    version: int


class NotYet(Exception):
    """The digest's migration still has runs to apply: deliver it later."""


def moved(
    withdrawn: list[dict[str, Any]],
    *,
    digest: bool | None,
    migration_id: int | None,
    definition_id: str,
    version: int,
) -> Moved:
    """What a move left: ``withdrawn`` rows carry ``assignment_mode``/``assignment_value``;
    ``digest`` is the record's choice (None without a record: the setting's default)."""
    if digest is None:
        from workflows import conf

        digest = bool(conf.get().MIGRATE.DIGEST_NOTICES)
    return Moved(
        assignees=assignees(withdrawn),
        digest=bool(digest),
        migration_id=int(migration_id) if migration_id else None,
        definition_id=definition_id,
        version=int(version),
    )


def assignees(withdrawn: list[dict[str, Any]]) -> frozenset[tuple[str, str]]:
    """Who held the withdrawn approvals: "the same assignees" is the same assignment (mode and
    value: the same user, or the same group)."""
    return frozenset((str(t["assignment_mode"]), str(t["assignment_value"])) for t in withdrawn)


def wanted(migration_id: int) -> bool:
    """Whether a migration record asked for digests."""
    row = db.fetchone(SQL.wanted, [int(migration_id)])
    return bool(row and row[0])


def key(m: Moved, mode: str, value: str, command_id: Any) -> str:
    """The digest's idempotency key: the migration's (a single-run migration without a record:
    its command's) and the assignee's (hashed: a group name may be 255 characters long)."""
    who = hashlib.sha256(f"{mode}\x00{value}".encode()).hexdigest()[:32]
    scope = f"m{m.migration_id}" if m.migration_id else f"c{command_id}"
    return f"digest:{scope}:{who}"


def statement(m: Moved, *, run_id: Any, command_id: Any, mode: str, value: str, count: int) -> tuple[str, list[Any]]:
    """The upsert of the digest of ``mode``/``value`` adding ``count`` moved approvals."""
    payload = {
        "migration": m.migration_id,
        "definition_id": m.definition_id,
        "version": m.version,
        "mode": mode,
        "value": value,
        "count": int(count),
    }
    return SQL.upsert, [
        str(run_id),
        command_id,
        f"{mode}:{value}"[:2048],
        db.jsonb(payload),
        key(m, mode, value, command_id),
        FIRST_LOOK_SECONDS,
    ]


def kept(moved: Moved | None, mode: str, value: str) -> bool:
    """Whether an approval opened for ``mode``/``value`` goes to assignees the move took one
    from (no "New task" notice then)."""
    return moved is not None and (mode, value) in moved.assignees


def record_kept(drive: Any, *, mode: str, value: str) -> None:
    """An approval reopened for the same assignees in a MIGRATION segment: its digest counts
    it when the migration asked for one (travels with the segment's next statement)."""
    m: Moved = drive.moved
    if not m.digest:
        return
    pipeline.defer(
        *statement(m, run_id=drive.run["id"], command_id=drive.command_id, mode=mode, value=value, count=1),
        pipeline.ignore_answer,
    )


def migration_open(migration_id: int) -> bool:
    return db.fetchone(SQL.migration_open, [int(migration_id)]) is not None


def postpone(intent: dict[str, Any]) -> None:
    db.execute(SQL.postpone, [RECHECK_SECONDS, intent["id"], intent["token"]])


def message(payload: dict[str, Any]) -> tuple[str, str]:
    """The digest's subject and body (no value of any run: counts, the workflow, a revision)."""
    from django.utils.translation import ngettext

    from workflows.engine.outbox.delivery import inbox_link

    n = int(payload.get("count") or 0)
    version = payload.get("version")
    subject = ngettext(
        "%(count)d of your tasks moved to revision %(version)s",
        "%(count)d of your tasks moved to revision %(version)s",
        n,
    ) % {"count": n, "version": version}
    body = (
        ngettext(
            "A migration moved %(count)d of your tasks of %(workflow)s to revision %(version)s. "
            "It is still yours, in your inbox.",
            "A migration moved %(count)d of your tasks of %(workflow)s to revision %(version)s. "
            "They are still yours, in your inbox.",
            n,
        )
        % {"count": n, "workflow": payload.get("definition_id", ""), "version": version}
        + f"\n\n{inbox_link()}\n"
    )
    return subject, body
