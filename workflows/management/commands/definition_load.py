"""Load a definition document from a file as a candidate (optionally publish and activate it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from workflows import definitions
from workflows.exceptions import WorkflowError
from workflows.management.commands._definitions import describe, failure


class Command(BaseCommand):
    help = "Load a YAML/JSON definition document into a scope as a CANDIDATE."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--scope", default="default")
        parser.add_argument("--format", choices=["yaml", "json"], help="default: from the file suffix")
        parser.add_argument("--publish", action="store_true", help="publish after loading")
        parser.add_argument("--activate", action="store_true", help="publish and activate in the scope")
        parser.add_argument("--author", default="")
        parser.add_argument("--revision", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        if not path.is_file():
            raise CommandError("no such file")
        fmt = options["format"] or ("json" if path.suffix == ".json" else "yaml")
        metadata = {"source_type": "file", "source_uri": path.name[:2048]}
        if options["author"]:
            metadata["source_author"] = options["author"]
        if options["revision"]:
            metadata["source_revision"] = options["revision"]
        scope = options["scope"]
        try:
            record = definitions.load(scope=scope, text=path.read_bytes(), format=fmt, metadata=metadata)
            self.stdout.write(f"loaded {describe(record)}")
            if options["publish"] or options["activate"]:
                record = definitions.publish(scope=scope, definition_id=record.definition_id, version=record.version)
                self.stdout.write(f"published {describe(record)}")
            if options["activate"]:
                definitions.activate(scope=scope, definition_id=record.definition_id, version=record.version)
                self.stdout.write(f"activated {record.definition_id} v{record.version} in {scope}")
        except WorkflowError as error:
            raise failure(error) from None
