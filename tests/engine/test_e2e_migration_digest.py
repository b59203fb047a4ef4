"""A migration's digest through the real Celery worker and beat: recorded by Apply, postponed
while runs are left, delivered by the sweep once nothing is left to apply — one intent, one
delivery, however many wake-ups and repeated delivery messages go by."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from tests.engine.test_migration_notices import REVISION_1, REVISION_2
from tests.support.waiting import eventually
from workflows import definitions, operations, tasks
from workflows.models import MigrationRecord, OutboxIntent, Park

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_digest_is_delivered_once_after_the_migration(celery_worker_process: Any) -> None:
    get_user_model().objects.create_user(username="alice", email="alice@example.com")
    for text, activate in ((REVISION_1, True), (REVISION_2, False)):
        ref = definitions.load(scope="default", text=text, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(
                scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
            )
    for i in range(6):
        operations.start(definition_id="notice-move", payload={"route": "review"}, business_key=f"K-{i}")
    eventually(
        lambda: Park.objects.filter(left_at__isnull=True, node="review").count() == 6,
        what="six runs parked at review",
        details=celery_worker_process.logs,
    )
    record_id = operations.migration_preview(
        scope="default",
        definition_id="notice-move",
        source_version=1,
        target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "review", "runs": "all"}],
        notify_digest=True,
    )
    assert record_id is not None
    progress = operations.migration_apply(record_id=record_id)
    assert progress.left == 0
    digest = OutboxIntent.objects.get(kind="DIGEST")
    tasks.deliver.delay(digest.pk)  # an extra delivery message, as a repeated one would be
    eventually(
        lambda: OutboxIntent.objects.get(pk=digest.pk).status == "DELIVERED",
        timeout=60,
        what="the sweep to deliver the digest",
        details=celery_worker_process.logs,
    )
    tasks.deliver.delay(digest.pk)  # and one after: it delivers nothing
    delivered = OutboxIntent.objects.get(pk=digest.pk)
    assert (delivered.payload["count"], delivered.attempts) == (6, 1)
    assert OutboxIntent.objects.filter(kind="DIGEST").count() == 1
    assert operations.migration_progress(record_id=record_id).counts == {"MOVED": 6}
    assert MigrationRecord.objects.get(pk=record_id).notify_digest is True
    # no "New task" for alice's six reviews: the only notices are those of revision 1's start
    assert OutboxIntent.objects.filter(kind="NOTIFY").count() == 6
