"""Purge ended runs on demand, with every row that references them (docs/operations.md)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from workflows import conf, operations


def _moment(text: str) -> dt.datetime:
    """An ISO date (midnight UTC) or date and time (UTC unless it names an offset)."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError("--ended-before must be an ISO date or date and time (2026-01-01)") from None
    if timezone.is_naive(value):
        value = value.replace(tzinfo=dt.UTC)
    return value


def _check_archive_dir(path: str, *, given: bool) -> None:
    """Refuse, before anything is purged, an archive folder that is a file, cannot be made or
    cannot be written (a clear error instead of a traceback halfway through)."""
    where = "--archive-dir" if given else "WORKFLOWS['RETENTION']['ARCHIVE_DIR']"
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"{where} names a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"{where} cannot be made ({exc.strerror or 'not a folder'})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CommandError(f"{where} is not writable")


class Command(BaseCommand):
    help = (
        "Purge ended runs (COMPLETED, CANCELLED, COMPENSATED, EXPIRED; FAILED with --include-failed) "
        "that ended before --ended-before, with their commands, history, tasks and every other row, "
        "in batches of one transaction each. Without --ended-before the retention policy decides "
        "(WORKFLOWS['RETENTION'] and each version's retention days)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--ended-before", type=_moment, default=None, metavar="DATE")
        parser.add_argument("--definition", default=None, metavar="DEFINITION_ID", help="only runs of this definition")
        parser.add_argument("--include-failed", action="store_true", help="FAILED runs too (no retry possible after)")
        parser.add_argument("--dry-run", action="store_true", help="print what would be purged, change nothing")
        parser.add_argument(
            "--archive-dir",
            default=None,
            metavar="DIR",
            help="archive to this folder first (default: RETENTION.ARCHIVE_DIR)",
        )
        parser.add_argument("--batch-size", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] is not None and options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        archive_dir = options["archive_dir"] or conf.get().RETENTION.ARCHIVE_DIR or None
        if archive_dir and not options["dry_run"]:
            _check_archive_dir(archive_dir, given=bool(options["archive_dir"]))
        report = operations.purge_runs(
            ended_before=options["ended_before"],
            definition_id=options["definition"],
            include_failed=options["include_failed"],
            archive_dir=None if options["dry_run"] else archive_dir,
            dry_run=options["dry_run"],
            batch_size=options["batch_size"],
        )
        verb = "would purge" if report.dry_run else "purged"
        self.stdout.write(f"{verb} {report.runs} run(s) in {report.batches} batch(es)")
        for name, count in report.rows.items():
            if name != "runs":
                self.stdout.write(f"  {name}: {count}")
        for path in report.archives:
            self.stdout.write(f"archived to {path}")
