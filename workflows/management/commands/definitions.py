"""List definitions and activation records; deprecate, retire, reinstate, follow, deactivate."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from workflows import definitions
from workflows.exceptions import WorkflowError
from workflows.management.commands._definitions import describe, failure

VERSIONED = ("deprecate", "retire", "reinstate")


class Command(BaseCommand):
    help = "Definition lifecycle: list, activations, deprecate, retire, reinstate, follow, deactivate-default."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list")
        listing.add_argument("--scope")
        listing.add_argument("--id", dest="definition_id")
        records = sub.add_parser("activations")
        records.add_argument("--scope")
        for action in VERSIONED:
            p = sub.add_parser(action)
            p.add_argument("definition_id")
            p.add_argument("version", type=int)
            p.add_argument("--scope", default="default")
        follow = sub.add_parser("follow")
        follow.add_argument("definition_id")
        follow.add_argument("--scope", required=True)
        deactivate = sub.add_parser("deactivate-default")
        deactivate.add_argument("definition_id")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "list":
                for record in definitions.list(scope=options["scope"], definition_id=options["definition_id"]):
                    self.stdout.write(describe(record))
            elif action == "activations":
                for found in definitions.activations(scope=options["scope"]):
                    self.stdout.write(f"{found.scope}/{found.definition_id} -> {found.target_scope} v{found.version}")
            elif action in VERSIONED:
                operation = getattr(definitions, action)
                record = operation(
                    scope=options["scope"], definition_id=options["definition_id"], version=options["version"]
                )
                self.stdout.write(f"{action}: {describe(record)}")
            elif action == "follow":
                definitions.follow(scope=options["scope"], definition_id=options["definition_id"])
                self.stdout.write("following the default scope")
            elif action == "deactivate-default":
                definitions.deactivate_default(definition_id=options["definition_id"])
                self.stdout.write("default activation cleared")
        except WorkflowError as error:
            raise failure(error) from None
