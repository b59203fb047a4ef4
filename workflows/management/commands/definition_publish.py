"""Publish a loaded definition version (build its plan from the stored text)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from workflows import definitions
from workflows.exceptions import WorkflowError
from workflows.management.commands._definitions import describe, failure


class Command(BaseCommand):
    help = "Publish a CANDIDATE definition version: it becomes AVAILABLE."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("definition_id")
        parser.add_argument("version", type=int)
        parser.add_argument("--scope", default="default")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            record = definitions.publish(
                scope=options["scope"], definition_id=options["definition_id"], version=options["version"]
            )
        except WorkflowError as error:
            raise failure(error) from None
        self.stdout.write(f"published {describe(record)}")
