"""A record deleted by a process that never saved a record nor served a request is captured.

Regression (issue 39): the trigger registry was read, and ``post_delete`` connected for the
watched and subject models, only when a process saved a record or started a request. A delete
from ``manage.py shell``, a management command or a cron script was therefore not captured:
the run about the record stayed WAITING with a live approval for a record that no longer
existed. Now every process reads the registry when it first connects to the database after
the apps are ready, so the delete below (a separate ``manage.py`` process) tears the run down.
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from capture.models import Capture
from demo.models import PurchaseOrder
from tests.support.waiting import eventually
from workflows.models import Run, Task

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
DELETE = "from demo.models import PurchaseOrder; PurchaseOrder.objects.get(number='E2E-SHELL').delete()"


def test_a_delete_from_a_manage_py_process_cancels_the_run_about_the_record(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy()
    po = PurchaseOrder.objects.create(number="E2E-SHELL", requester="requester", total=Decimal("5000.00"))
    task = eventually(
        lambda: Task.objects.filter(run__business_key="E2E-SHELL", status="OPEN").first(),
        timeout=60,
        what="the review of the order to open",
        details=celery_worker_process.logs,
    )

    # a process of its own, as a cron script or an operator's shell: it saves nothing and
    # serves no request before the delete
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", DELETE],
        cwd=REPO,
        env=celery_worker_process.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not PurchaseOrder.objects.filter(pk=po.pk).exists()

    # written in the deleting transaction, which has committed: there now, or never
    capture = Capture.objects.filter(model="demo.PurchaseOrder", object_pk=str(po.pk), event="deleted").first()
    assert capture is not None, "the manage.py process did not capture the deletion"
    eventually(
        lambda: Run.objects.get(pk=task.run_id).status == "CANCELLED",
        timeout=60,
        what="the worker to tear down the run about the deleted order",
        details=celery_worker_process.logs,
    )
    run = Run.objects.get(pk=task.run_id)
    task.refresh_from_db()
    assert (run.cancel_reason, task.status == "OPEN") == ("record deleted", False)
    capture.refresh_from_db()
    assert capture.status == "DISPATCHED"
