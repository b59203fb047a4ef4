"""A background migration through a real Celery worker and beat: 2,000 parked runs applied in
batches, the worker killed (SIGKILL) in the middle of it and started again; the sweep hands the
record to a new task once the dead task's lease lapses, and the record finishes by itself with
every run moved exactly once.

The runs are parked by the Migrate benchmark's bulk SQL (``tests/support/bulk_migration.py``
over ``bench/migrate_dialog.py``: runs, parks and approvals written set-based, not through the
engine). The same crash seen by an operator in the Migrate dialog:
tests/e2e/test_migrate_background_kill_browser.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import bulk_migration
from tests.support.bulk_migration import AT_REVIEW, DEFINITION, item_statuses
from tests.support.waiting import eventually
from workflows import operations
from workflows.engine import actors
from workflows.models import MigrationRecord

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_background_migration_survives_a_killed_worker_and_finishes_by_itself(
    celery_worker_process: Any, crash_celery_worker: Any
) -> None:
    bulk_migration.park()  # a third at each position: 2,000 at the approval
    assert bulk_migration.parked_at_review() == AT_REVIEW
    operator = actors.service("operator")
    record_id = operations.migration_preview(
        scope="default",
        definition_id=DEFINITION,
        source_version=1,
        target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "manager-review", "runs": "all"}],
        actor=operator,
    )
    assert record_id is not None
    operations.migration_apply_background(record_id=record_id, actor=operator, confirm=AT_REVIEW)

    # some batches committed, some runs left: kill the worker in the middle of the apply
    eventually(
        lambda: item_statuses(record_id)["MOVED"] >= 400,
        timeout=120,
        interval=0.05,
        what="the first batches to be applied",
        details=celery_worker_process.logs,
    )
    crash_celery_worker(restart=False)
    before = item_statuses(record_id)
    assert before["SELECTED"] > 0, f"the apply finished before the kill: {before}"
    assert MigrationRecord.objects.get(pk=record_id).status == "APPLYING"
    celery_worker_process.start_worker()

    # nobody presses anything: the sweep finds the lapsed lease and a new task carries on
    eventually(
        lambda: MigrationRecord.objects.get(pk=record_id).status == "DONE",
        timeout=240,
        interval=0.5,
        what="the record to finish by itself",
        details=celery_worker_process.logs,
    )
    # every run moved exactly once: one WORKFLOW_MIGRATED entry each, none missing, one new
    # approval each (none opened twice), all at the renamed node of revision 2
    assert bulk_migration.moved_runs(record_id) == {
        "items": {"MOVED": AT_REVIEW},
        "migrated entries per run": {1: AT_REVIEW},
        "open approvals at the target": AT_REVIEW,
        "runs at the target": AT_REVIEW,
    }
