"""A background migration through a real Celery worker and beat: 5,000 parked runs applied in
batches, the worker killed (SIGKILL) in the middle of it and started again; the sweep hands the
record to a new task once the dead task's lease lapses, and the record finishes by itself with
every run moved exactly once.

The runs are parked by the Migrate benchmark's bulk SQL (``bench/migrate_dialog.py``: runs,
parks and approvals written set-based, not through the engine).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db import connection

from bench import migrate_dialog as parking
from tests.support.waiting import eventually
from workflows import operations
from workflows.engine import actors
from workflows.models import MigrationItem, MigrationRecord, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AT_REVIEW = 5000


def statuses(record_id: int) -> Counter[str]:
    return Counter(MigrationItem.objects.filter(record_id=record_id).values_list("status", flat=True))


def test_a_background_migration_survives_a_killed_worker_and_finishes_by_itself(
    celery_worker_process: Any, crash_celery_worker: Any
) -> None:
    plan_hash = parking.deploy()
    parking.park(3 * AT_REVIEW, plan_hash)  # a third at each position: 5,000 at the approval
    assert Run.objects.filter(definition_id=parking.DEFINITION, current_step="review").count() == AT_REVIEW
    operator = actors.service("operator")
    record_id = operations.migration_preview(
        scope="default",
        definition_id=parking.DEFINITION,
        source_version=1,
        target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "manager-review", "runs": "all"}],
        actor=operator,
    )
    assert record_id is not None
    operations.migration_apply_background(record_id=record_id, actor=operator, confirm=AT_REVIEW)

    # some batches committed, some runs left: kill the worker in the middle of the apply
    eventually(
        lambda: statuses(record_id)["MOVED"] >= 400,
        timeout=120,
        interval=0.05,
        what="the first batches to be applied",
        details=celery_worker_process.logs,
    )
    crash_celery_worker(restart=False)
    before = statuses(record_id)
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
    assert statuses(record_id) == Counter({"MOVED": AT_REVIEW})
    with connection.cursor() as cursor:
        # WORKFLOW_MIGRATED entries per run of the record: exactly one each, no run missing
        cursor.execute(
            """
            SELECT coalesce(h.n, 0), count(*) FROM workflow_migration_items i
            LEFT JOIN (SELECT run_id, count(*) AS n FROM workflow_history WHERE type = 'WORKFLOW_MIGRATED'
                       GROUP BY run_id) h ON h.run_id = i.run_id
            WHERE i.record_id = %s GROUP BY 1
            """,
            [record_id],
        )
        assert dict(cursor.fetchall()) == {1: AT_REVIEW}
        cursor.execute(
            "SELECT count(*) FROM workflow_tasks WHERE run_id IN (SELECT run_id FROM workflow_migration_items "
            "WHERE record_id = %s) AND status = 'OPEN' AND step = 'manager-review'",
            [record_id],
        )
        assert cursor.fetchone()[0] == AT_REVIEW  # one new approval per run, none twice
    moved = Run.objects.filter(definition_id=parking.DEFINITION, version=2, current_step="manager-review")
    assert moved.count() == AT_REVIEW
