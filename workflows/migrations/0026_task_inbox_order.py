"""The open tasks of a user or a group in the API's order (``workflow_task_open_assigned``:
assignment, then ``created_at`` and ``id``), in place of ``workflow_task_inbox`` (assignment
only): ``GET /api/v1/tasks/all/?group=`` reads a page of a big group's tasks in order from the
index instead of sorting all of them first. One index entry per open task either way.

The new index is built CONCURRENTLY (outside a transaction) before the old one is dropped, so
the inbox is never without one and task writes are never blocked.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0025_run_open_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="task",
            index=models.Index(
                condition=models.Q(("status__in", ["OPEN", "COMPLETING"])),
                fields=["assignment_mode", "assignment_value", "created_at", "id"],
                name="workflow_task_open_assigned",
            ),
        ),
        RemoveIndexConcurrently(model_name="task", name="workflow_task_inbox"),
    ]
