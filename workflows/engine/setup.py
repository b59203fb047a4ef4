"""Wire the step types and handlers that live in their own modules (called once at start-up)."""

from __future__ import annotations


def install() -> None:
    from workflows.engine import calls, forks, migration, segment

    forks.install()
    calls.install()
    segment.migration_handler = migration.apply_migration
