"""The retention task through a real Celery worker: a message sent twice purges once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.engine import documents
from tests.support.waiting import eventually
from workflows import operations, tasks
from workflows.models import DefinitionVersion, HistoryEntry, Run, Task

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_repeated_retention_message_purges_the_old_runs_once(celery_worker_process: Any, deploy: Any) -> None:
    deploy(documents.APPROVAL)
    ended = [
        operations.start(definition_id="approval", payload={"number": f"R-{i}", "total": 10}).run_id for i in range(3)
    ]
    live = operations.start(definition_id="approval", payload={"number": "R-open", "total": 5000}).run_id
    eventually(
        lambda: (
            Run.objects.filter(pk__in=ended, status="COMPLETED").count() == 3
            and Task.objects.filter(run_id=live, status="OPEN").exists()
        ),
        timeout=30,
        what="three runs to complete and one to wait for approval",
        details=celery_worker_process.logs,
    )
    live_history = list(HistoryEntry.objects.filter(run_id=live).order_by("seq").values())
    Run.objects.filter(pk__in=ended).update(ended_at=timezone.now() - timedelta(days=40))
    # the worker has no site retention set: the version's override is what lets them go
    DefinitionVersion.objects.filter(definition_id="approval").update(retention_days=30)

    tasks.retention.delay()
    tasks.retention.delay()  # a repeated message
    eventually(
        lambda: not Run.objects.filter(pk__in=ended).exists(),
        timeout=30,
        what="the old ended runs to be purged",
        details=celery_worker_process.logs,
    )
    assert not HistoryEntry.objects.filter(run_id__in=ended).exists()
    assert Run.objects.get(pk=live).status == "WAITING"
    assert list(HistoryEntry.objects.filter(run_id=live).order_by("seq").values()) == live_history
