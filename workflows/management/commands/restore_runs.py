"""Load archived runs back from the JSON Lines files a purge wrote (docs/operations.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from workflows import operations


class Command(BaseCommand):
    help = (
        "Restore the runs of archive files (runs-*.jsonl) with every row exactly as archived, in one "
        "transaction. A run that is stored already is skipped, so a file may be restored twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = operations.restore_runs(paths=options["files"])
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"restored {report.runs} run(s), skipped {report.skipped} stored already")
        for name, count in report.rows.items():
            if name != "runs":
                self.stdout.write(f"  {name}: {count}")
