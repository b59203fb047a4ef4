"""A large background migration for end-to-end tests: 2,000 runs parked at an approval by the
Migrate benchmark's bulk SQL (``bench/migrate_dialog.py``: runs, parks and approvals written
set-based, not through the engine), and what the database says once they were moved.

Shared by the killed-worker tests, tests/engine/test_e2e_migrate_background.py (operations
called directly) and tests/e2e/test_migrate_background_kill_browser.py (the Migrate dialog).
The helpers read; the tests assert.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import connection

from bench import migrate_dialog as parking
from workflows.models import MigrationItem, Run

DEFINITION = parking.DEFINITION
# runs parked at the approval ``review`` of revision 1: ten apply batches (MIGRATE.APPLY_BATCH
# 200), so the worker is killed with batches done and batches left (bench/migrate_dialog.py
# measures 5,000 and more)
AT_REVIEW = 2000
SOURCE, TARGET = "review", "manager-review"  # the approval, renamed in revision 2


def park() -> None:
    """Revisions 1 and 2 deployed (2 active), and ``3 * AT_REVIEW`` runs of revision 1 parked,
    a third at each position (the approval, a timer, a signal wait)."""
    plan_hash = parking.deploy()
    parking.park(3 * AT_REVIEW, plan_hash)


def parked_at_review() -> int:
    return Run.objects.filter(definition_id=DEFINITION, version=1, current_step=SOURCE).count()


def item_statuses(record_id: int) -> Counter[str]:
    """The migration items of a record, counted by status (SELECTED: not applied yet)."""
    return Counter(MigrationItem.objects.filter(record_id=record_id).values_list("status", flat=True))


def moved_runs(record_id: int) -> dict[str, Any]:
    """What the database holds of a record's move, per run of the record:

    - ``items``: the items counted by status;
    - ``migrated entries per run``: {number of WORKFLOW_MIGRATED history entries: runs with
      that many} — ``{1: n}`` when every run was moved exactly once and none was skipped;
    - ``open approvals at the target``: open approvals of the target node among its runs (one
      per run when none was opened twice);
    - ``runs at the target``: its runs now at the target node of revision 2.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce(h.n, 0), count(*) FROM workflow_migration_items i
            LEFT JOIN (SELECT run_id, count(*) AS n FROM workflow_history WHERE type = 'WORKFLOW_MIGRATED'
                       GROUP BY run_id) h ON h.run_id = i.run_id
            WHERE i.record_id = %s GROUP BY 1
            """,
            [record_id],
        )
        entries = dict(cursor.fetchall())
        cursor.execute(
            "SELECT count(*) FROM workflow_tasks WHERE run_id IN (SELECT run_id FROM workflow_migration_items "
            "WHERE record_id = %s) AND status = 'OPEN' AND step = %s",
            [record_id, TARGET],
        )
        approvals = cursor.fetchone()[0]
    of_record = MigrationItem.objects.filter(record_id=record_id).values("run_id")
    runs = Run.objects.filter(pk__in=of_record, version=2, current_step=TARGET)
    return {
        "items": dict(item_statuses(record_id)),
        "migrated entries per run": entries,
        "open approvals at the target": approvals,
        "runs at the target": runs.count(),
    }
