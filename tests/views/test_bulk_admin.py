"""The bulk operation admin: read-only records with their progress and per-run outcomes."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.engine import documents
from tests.views.test_tasks_admin import deploy, drain
from workflows import operations
from workflows.models import BulkOperation

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_bulk_operation_shows_its_progress_and_results_read_only(django_user_model: Any) -> None:
    deploy(documents.APPROVAL)
    runs = [
        operations.start(definition_id="approval", payload={"number": f"PO-{i}", "total": 5000}).run_id
        for i in range(3)
    ]
    drain()
    operations.cancel(run_id=runs[2], reason="gone")
    operation_id = operations.bulk_operation_create(action="cancel", run_ids=runs, reason="admin view")
    operations.bulk_operation_apply_batch(operation_id=operation_id)
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="root"))

    listed = client.get("/admin/workflows/bulkoperation/")
    assert listed.status_code == 200
    page = client.get(f"/admin/workflows/bulkoperation/{operation_id}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert '<progress value="3" max="3"' in text and "APPLIED 2, REFUSED 1" in text
    results = client.get(f"/admin/workflows/bulkoperationitem/?operation__id__exact={operation_id}&status=REFUSED")
    assert results.status_code == 200 and "SIGNAL_REJECTED" in results.content.decode()
    # nothing here writes: no add, no delete, no save
    assert client.get("/admin/workflows/bulkoperation/add/").status_code == 403
    client.post(f"/admin/workflows/bulkoperation/{operation_id}/change/", {"reason": "changed"})
    assert BulkOperation.objects.get(pk=operation_id).reason == "admin view"
    client.post(f"/admin/workflows/bulkoperation/{operation_id}/delete/", {"post": "yes"})
    assert BulkOperation.objects.filter(pk=operation_id).exists()
