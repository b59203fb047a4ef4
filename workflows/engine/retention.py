"""The data lifecycle: ended runs purged in bounded batches, optionally archived first, and
idempotency keys expired on their schedule (docs/operations.md, "Retention").

Each batch is one short transaction: it locks up to ``BATCH_SIZE`` purgeable runs with
``SKIP LOCKED`` (two purges, or a purge and a repeated message, take disjoint runs and never
wait on each other), writes them to the archive when one is configured (fsynced and renamed
into place before anything is deleted), deletes every row that references them and the runs,
and commits. A worker killed anywhere in a batch leaves the rows as they were (the batch rolls
back) and at most a finished archive file, named by the batch's runs, that the next try of the
same runs replaces; a batch whose delete fails removes its file once the database shows it
rolled back. The archive may hold a run twice (a batch of other runs after a kill), it never
misses one. ``REFERENCES`` names every foreign key that reaches a run and how it is handled.
Nothing here touches a live run: live runs have no ``ended_at`` and a status outside the
purgeable ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from workflows import conf
from workflows.engine import sql

log = logging.getLogger("workflows.retention")
SQL = sql.load("retention")
ARCHIVE_FORMAT = "switchyard.run-archive/1"
LOCK_TIMEOUT_MS = 5000  # a batch that waits longer for a lock gives up; the next one retries

# the tables a run's rows live in, in the order the archive names them and restore inserts them
# (the run first); ``delete_rows`` answers its counts in this order
TABLES: tuple[tuple[str, str], ...] = (
    ("runs", "workflow_runs"),
    ("commands", "workflow_commands"),
    ("history", "workflow_history"),
    ("tasks", "workflow_tasks"),
    ("timers", "workflow_timers"),
    ("parks", "workflow_parks"),
    ("branches", "workflow_branches"),
    ("joins", "workflow_joins"),
    ("outbox", "workflow_outbox"),
    ("effect_markers", "workflow_effect_markers"),
    ("segments", "workflow_segment_log"),
    ("dedup", "workflow_dedup"),
    ("migration_items", "workflow_migration_items"),
    ("bulk_items", "workflow_bulk_operation_items"),
    ("webhook_attempts", "workflow_webhook_attempts"),
)

# Every foreign key that reaches the runs table, directly or through another row of a run, and
# how the purge handles it: (table, column) -> the TABLES name whose rows it deletes and
# archives, or "candidates" (a called run's link to its caller: children are purged first).
# tests/engine/test_retention.py enumerates the models' foreign keys and fails on one missing here.
REFERENCES: dict[tuple[str, str], str] = {
    ("workflow_runs", "parent_run_id"): "candidates",
    ("workflow_commands", "run_id"): "commands",
    ("workflow_history", "run_id"): "history",
    ("workflow_tasks", "run_id"): "tasks",
    ("workflow_timers", "run_id"): "timers",
    ("workflow_parks", "run_id"): "parks",
    ("workflow_branches", "run_id"): "branches",
    ("workflow_joins", "run_id"): "joins",
    ("workflow_outbox", "run_id"): "outbox",
    ("workflow_effect_markers", "command_id"): "effect_markers",
    ("workflow_migration_items", "run_id"): "migration_items",
    ("workflow_bulk_operation_items", "run_id"): "bulk_items",
    ("workflow_webhook_attempts", "intent_id"): "webhook_attempts",
}


@dataclass
class PurgeReport:
    """What a purge removed (or, in a dry run, would remove): rows per table, archive files."""

    rows: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _table in TABLES})
    batches: int = 0
    archives: list[str] = field(default_factory=list)
    dry_run: bool = False
    more: bool = False  # the batch limit stopped it with purgeable runs left

    @property
    def runs(self) -> int:
        return self.rows["runs"]

    def add(self, counts: Iterable[int]) -> None:
        for (name, _table), count in zip(TABLES, counts, strict=True):
            self.rows[name] += int(count)


@dataclass(frozen=True)
class Selection:
    """Which runs a purge takes. ``policy``: each run's own retention (its version's
    ``retention_days``, else the site's days for its status); otherwise every run of the
    purgeable statuses that ended before ``ended_before``."""

    ended_before: datetime | None = None
    policy: bool = False
    definition_id: str | None = None
    include_failed: bool = False
    ended_days: int | None = None
    failed_days: int | None = None

    def params(self, limit: int) -> dict[str, Any] | None:
        """The candidate query's parameters, or None when nothing can be purgeable."""
        if self.policy:
            days = [d for d in (self.ended_days, self.failed_days if self.include_failed else None) if d is not None]
            shortest = _shortest_override()
            if shortest is not None:
                days.append(shortest)
            if not days:
                return None  # keep forever: nothing to look at
            horizon = timezone.now() - timedelta(days=min(days))
        else:
            if self.ended_before is None:
                return None
            horizon = self.ended_before
        return {
            "horizon": horizon,
            "failed": self.include_failed,
            "definition": self.definition_id,
            "policy": self.policy,
            "ended_days": self.ended_days,
            "failed_days": self.failed_days,
            "limit": limit,
        }


def policy() -> Selection:
    """The site's retention (``WORKFLOWS["RETENTION"]``) with the per-version overrides."""
    settings = conf.get().RETENTION
    failed = settings.FAILED_RUNS_DAYS
    return Selection(
        policy=True, include_failed=failed is not None, ended_days=settings.ENDED_RUNS_DAYS, failed_days=failed
    )


def _shortest_override() -> int | None:
    with connection.cursor() as cur:
        cur.execute(SQL.shortest_override)
        row = cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def purge(
    selection: Selection,
    *,
    archive_dir: str | os.PathLike[str] | None = None,
    batch_size: int | None = None,
    max_batches: int | None = None,
    dry_run: bool = False,
) -> PurgeReport:
    """Purge the selected runs in batches until none is left or ``max_batches`` ran.

    A dry run does the same batches in one transaction that is rolled back (no archive is
    written): its counts are what a purge would remove now, and it changes nothing.
    """
    settings = conf.get().RETENTION
    limit = int(batch_size or settings.BATCH_SIZE)
    report = PurgeReport(dry_run=dry_run)
    if dry_run:
        with transaction.atomic():
            _batches(selection, limit, max_batches, None, report)
            transaction.set_rollback(True)
        return report
    _batches(selection, limit, max_batches, archive_dir, report)
    return report


def _batches(
    selection: Selection,
    limit: int,
    max_batches: int | None,
    archive_dir: str | os.PathLike[str] | None,
    report: PurgeReport,
) -> None:
    while True:
        if max_batches is not None and report.batches >= max_batches:
            report.more = True
            return
        params = selection.params(limit)
        if params is None:
            return
        batch = _Batch()
        try:
            with transaction.atomic():
                _one_batch(params, archive_dir, batch)
        except Exception:  # a failed delete or commit; a killed worker's file is replaced by the next try
            _forget_archive(batch)
            raise
        if not batch.ids:
            return
        report.add(batch.counts)
        if batch.archive is not None:
            report.archives.append(str(batch.archive))
        report.batches += 1
        if not report.dry_run:  # a dry run's batches are rolled back at the end: nothing was purged
            log.info("purged %d run(s)", len(batch.ids))


@dataclass
class _Batch:
    ids: list[Any] = field(default_factory=list)
    counts: tuple[int, ...] = ()
    archive: Path | None = None


def _one_batch(params: dict[str, Any], archive_dir: str | os.PathLike[str] | None, batch: _Batch) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('lock_timeout', %s, true)", [f"{LOCK_TIMEOUT_MS}ms"])
        cur.execute(SQL.candidates, params)
        batch.ids = [row[0] for row in cur.fetchall()]
        if not batch.ids:
            return
        if archive_dir:
            cur.execute(SQL.archive_lines, [batch.ids])
            lines = [str(row[0]) for row in cur.fetchall()]
            batch.archive = write_archive(archive_dir, lines, name=archive_name(batch.ids))
        cur.execute(SQL.delete_rows, {"ids": batch.ids})
        batch.counts = tuple(int(count) for count in (cur.fetchone() or ()))


def archive_name(ids: Iterable[Any]) -> str:
    """The archive file of a batch, named by its runs: a batch repeated after a failed delete or
    a killed worker writes the same name, so its file is replaced, never a second copy."""
    digest = hashlib.sha256("\n".join(sorted(str(i) for i in ids)).encode("ascii")).hexdigest()[:24]
    return f"runs-{digest}.jsonl"


def _forget_archive(batch: _Batch) -> None:
    """A batch that failed after writing its archive: the file goes when the database shows the
    batch rolled back (its runs all still stored); when that cannot be known (the connection
    was lost at commit) the file stays, the archive may then hold a run twice, never miss one."""
    if batch.archive is None or not batch.ids:
        return
    try:
        with connection.cursor() as cur:
            cur.execute(SQL.stored_runs, [batch.ids])
            stored = int(cur.fetchone()[0])
    except Exception:  # noqa: BLE001 - unknown outcome: keep the file
        log.warning("purge batch of %d run(s) failed; its archive %s is kept", len(batch.ids), batch.archive.name)
        return
    if stored != len(batch.ids):
        return
    batch.archive.unlink(missing_ok=True)
    _fsync_dir(batch.archive.parent)
    log.warning("purge batch of %d run(s) failed and was rolled back; its archive was removed", len(batch.ids))


def write_archive(directory: str | os.PathLike[str], lines: list[str], *, name: str | None = None) -> Path:
    """Write one batch's lines to ``directory`` and make it durable: written to a ``.partial``
    name, fsynced, renamed to ``name`` (default ``runs-<UTC date>T<time>-<random>.jsonl``; an
    existing file of that name is replaced) and the directory fsynced. Only then may the rows
    be deleted."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    if name is None:
        now = timezone.now()
        name = f"runs-{now:%Y-%m-%dT%H%M%S}-{uuid.uuid4().hex[:12]}.jsonl"
    partial = folder / (name + f".{uuid.uuid4().hex[:8]}.partial")
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    final = folder / name
    os.replace(partial, final)
    _fsync_dir(folder)
    return final


def _fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def expire_idempotency_keys(
    *, days: int | None = None, batch_size: int | None = None, max_batches: int | None = None
) -> int:
    """Delete idempotency keys older than ``IDEMPOTENCY_KEYS_DAYS``, one batch per transaction.
    A request repeated after that is a new request."""
    settings = conf.get().RETENTION
    keep = int(days if days is not None else settings.IDEMPOTENCY_KEYS_DAYS)
    limit = int(batch_size or settings.BATCH_SIZE)
    total = 0
    batches = 0
    while max_batches is None or batches < max_batches:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(SQL.expire_keys, {"days": keep, "limit": limit})
            deleted = int(cur.rowcount)
        total += deleted
        batches += 1
        if deleted < limit:
            break
    return total


# rows that belong to something outside the run come back only while that is still stored (a
# bulk-operation item whose operation is gone stays out); an archive line lacking a table (written
# before it was archived) restores none of its rows
RESTORE_CONDITIONS: dict[str, str] = {
    "bulk_items": "WHERE EXISTS (SELECT 1 FROM workflow_bulk_operations o WHERE o.id = x.operation_id)",
}


@dataclass
class RestoreReport:
    runs: int = 0
    skipped: int = 0  # already stored (an archive may hold a run twice)
    rows: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _table in TABLES})


def restore(paths: Iterable[str | os.PathLike[str]]) -> RestoreReport:
    """Load archived runs back, all files in one transaction: each table's rows exactly as
    they were archived (``jsonb_populate_recordset``). A run that is stored already is skipped
    whole, so restoring a file twice, or a run archived twice, is harmless. A restored run whose
    caller is neither stored nor restored loses that link (``parent_run_id`` null). A line that
    holds a row of another run than its own (a tampered or spliced archive) is refused before
    anything is written, and with it the whole restore: live runs are never touched."""
    report = RestoreReport()
    restored: list[Any] = []
    with transaction.atomic(), connection.cursor() as cur:
        for path in paths:
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                    except ValueError:
                        raise ValueError(f"{os.fspath(path)}: line {number} is not JSON") from None
                    if not isinstance(item, dict) or item.get("format") != ARCHIVE_FORMAT:
                        raise ValueError(f"{os.fspath(path)}: line {number} is not a run archive line")
                    if _holds_foreign_rows(cur, line):
                        # the transaction rolls back: nothing of any file is restored
                        raise ValueError(
                            f"{os.fspath(path)}: line {number} holds rows of another run than its own; "
                            "nothing was restored"
                        )
                    run_id = _restore_line(cur, line, report)
                    if run_id is not None:
                        restored.append(run_id)
        if restored:
            cur.execute(SQL.unlink_missing_parents, [restored])
    return report


# the tables whose rows carry their run's id (effect markers name a command of the run instead)
# rows with a run_id of their own; effect markers (by command) and webhook attempts (by outbox
# intent) are checked against the line's own commands and intents instead
_RUN_ID_TABLES = [name for name, _table in TABLES[1:] if name not in ("effect_markers", "webhook_attempts")]


def _holds_foreign_rows(cur: Any, line: str) -> bool:
    """Whether the line holds a row of another run than the one it restores: restoring it would
    write into that run (a signal injected into a live run), so the whole restore is refused."""
    cur.execute(SQL.foreign_rows, {"line": line, "tables": _RUN_ID_TABLES})
    row = cur.fetchone()
    return bool(row and row[0])


def _restore_line(cur: Any, line: str, report: RestoreReport) -> Any:
    # the line's text goes to the server untouched: its numbers and timestamps are read there
    cur.execute(
        "INSERT INTO workflow_runs SELECT * FROM jsonb_populate_record(NULL::workflow_runs, %s::jsonb -> 'run') "
        "ON CONFLICT DO NOTHING RETURNING id",
        [line],
    )
    row = cur.fetchone()
    if row is None:
        report.skipped += 1
        return None
    report.runs += 1
    report.rows["runs"] += 1
    for name, table in TABLES[1:]:
        # dynamic only in the table name and a fixed condition, which come from this module
        cur.execute(
            f"INSERT INTO {table} SELECT * FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb -> %s) x "
            f"{RESTORE_CONDITIONS.get(name, '')} ON CONFLICT DO NOTHING",
            [line, name],
        )
        report.rows[name] += int(cur.rowcount)
    return row[0]
