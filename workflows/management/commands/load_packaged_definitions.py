"""Record the packaged definition documents in the default scope (idempotent; start scripts and CI)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from workflows.definitions.packaged import record_packaged
from workflows.exceptions import WorkflowError
from workflows.management.commands._definitions import failure


class Command(BaseCommand):
    help = "Record and publish the workflow documents packaged in each app's workflows/ folder."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            outcomes = record_packaged()
        except WorkflowError as error:
            raise failure(error) from None
        for outcome in outcomes:
            self.stdout.write(
                f"{outcome.definition_id} v{outcome.version}: {outcome.action} ({outcome.status}) from {outcome.path}"
            )
        if not outcomes:
            self.stdout.write("no packaged definitions")
