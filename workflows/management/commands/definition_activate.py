"""Make a version what a start without a version runs in a scope."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from workflows import definitions
from workflows.exceptions import WorkflowError
from workflows.management.commands._definitions import failure


class Command(BaseCommand):
    help = "Activate an AVAILABLE version in a scope (target: the scope itself or the default scope)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("definition_id")
        parser.add_argument("version", type=int)
        parser.add_argument("--scope", default="default")
        parser.add_argument("--target-scope", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            found = definitions.activate(
                scope=options["scope"],
                definition_id=options["definition_id"],
                version=options["version"],
                target_scope=options["target_scope"],
                updated_by="manage.py",
            )
        except WorkflowError as error:
            raise failure(error) from None
        self.stdout.write(f"{found.scope}/{found.definition_id} -> {found.target_scope} v{found.version}")
