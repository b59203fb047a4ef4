"""Migration of runs between revisions of a definition.

- ``handler``: the MIGRATION command's segment (one run moved, cancelled or ended) and the
  registered state handlers;
- ``positions``: where runs are parked (counts per position, the runs at one);
- ``preview``: the selection frozen as a PREVIEWED record, and what Apply will do per row;
- ``apply``: Apply in bounded batches, and a record's progress;
- ``bulk``: the moves Apply makes set-based (the rest get MIGRATION commands);
- ``background``: Apply handed to a task (batches under a lease, resumed by the sweep after a
  crash), pause, resume and close.

Each module imports the ones it needs directly; this package re-exports what callers use,
so ``from workflows.engine import migration; migration.freeze(...)`` reads as one module.
"""

from workflows.engine.migration import background
from workflows.engine.migration.apply import apply_batch, progress
from workflows.engine.migration.handler import (
    apply_migration,
    register_migration_handler,
    unregister_migration_handler,
)
from workflows.engine.migration.positions import (
    OLDEST_AT_POSITION,
    counted_positions,
    parked_by_definition,
    parked_by_version,
    positions,
    positions_by_revision,
    runs_at,
)
from workflows.engine.migration.preview import (
    RowRequest,
    describe_target,
    discard,
    freeze,
    plan_of,
    row_facts,
)

__all__ = [
    "OLDEST_AT_POSITION",
    "RowRequest",
    "apply_batch",
    "apply_migration",
    "background",
    "counted_positions",
    "describe_target",
    "discard",
    "freeze",
    "parked_by_definition",
    "parked_by_version",
    "plan_of",
    "positions",
    "positions_by_revision",
    "progress",
    "register_migration_handler",
    "row_facts",
    "runs_at",
    "unregister_migration_handler",
]
