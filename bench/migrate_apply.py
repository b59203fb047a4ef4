"""The background apply rate of the Migrate dialog: runs moved per second by the Celery workers
after one Apply press (target: at least 500).

    python3 dev.py bench migrate-apply [--n 5000]     # alone (its own database, workers, beat)
    python3 dev.py bench                              # also a phase of the full bench

It parks ``3 * n`` runs of a two-revision workflow by bulk SQL (``migrate_dialog.park``: runs,
parks and approvals written set-based, not through the engine; ``n`` wait at the approval),
previews a move of the ``n`` runs at the approval to the renamed node of revision 2, presses
Apply once (``operations.migration_apply_background``) and waits until the record is DONE. The
rate is ``n`` over the time from the press to the record's ``finished_at``, both read on the
database clock; ``MIGRATE.APPLY_BATCH`` runs per batch, each batch its own transaction, in
whichever worker process holds the record's lease.
"""

from __future__ import annotations

import time
from typing import Any

TARGET_RUNS_PER_S = 500.0


def measure(n: int, *, timeout: float = 300.0) -> dict[str, Any]:
    """Park, preview, press Apply, wait for DONE; the figures (Django is set up, workers run)."""
    import migrate_dialog
    from django.db import connection

    from workflows import conf, operations
    from workflows.engine import actors
    from workflows.models import MigrationItem, MigrationRecord

    migrate_dialog.clean()
    plan_hash = migrate_dialog.deploy()
    parked_s = migrate_dialog.park(3 * n, plan_hash)
    operator = actors.service("bench")
    record_id = operations.migration_preview(
        scope="default",
        definition_id=migrate_dialog.DEFINITION,
        source_version=1,
        target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "manager-review", "runs": "all"}],
        actor=operator,
    )
    assert record_id is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        pressed_at = cursor.fetchone()[0]
    started = time.perf_counter()
    operations.migration_apply_background(record_id=record_id, actor=operator, confirm=n)
    deadline = started + timeout
    while True:
        record = MigrationRecord.objects.get(pk=record_id)
        if record.status == "DONE":
            break
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the background apply of {n} runs did not finish within {timeout:.0f} s")
        time.sleep(0.05)
    wall = time.perf_counter() - started
    assert record.finished_at is not None
    seconds = (record.finished_at - pressed_at).total_seconds()
    counts: dict[str, int] = {}
    for status in MigrationItem.objects.filter(record_id=record_id).values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    moved = counts.get("MOVED", 0)
    result = {
        "runs": n,
        "moved": moved,
        "other_outcomes": {k: v for k, v in counts.items() if k != "MOVED"},
        "apply_batch": conf.get().MIGRATE.APPLY_BATCH,
        "seconds": round(seconds, 3),
        "wall_seconds": round(wall, 3),
        "runs_per_s": round(moved / seconds, 1) if seconds > 0 else 0.0,
        "park_seconds": round(parked_s, 2),
        "target_runs_per_s": TARGET_RUNS_PER_S,
    }
    migrate_dialog.clean()
    return result


def line(figures: dict[str, Any]) -> str:
    ok = figures["runs_per_s"] >= TARGET_RUNS_PER_S
    return (
        f"background apply: {figures['moved']:,} of {figures['runs']:,} runs moved in {figures['seconds']:.2f} s "
        f"= {figures['runs_per_s']:.0f} runs/s (APPLY_BATCH {figures['apply_batch']}) — "
        f"{'meets' if ok else 'misses'} the {TARGET_RUNS_PER_S:.0f} runs/s target"
    )
