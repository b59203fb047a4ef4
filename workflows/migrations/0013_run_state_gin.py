"""The GIN index behind the API's ``?state=`` search (``state @> ...``, jsonb_path_ops).

Built CONCURRENTLY (outside a transaction): the runs table takes writes on every step, and a
plain CREATE INDEX would block them for as long as the build takes on a large table.
"""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0012_task_claims"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["state"], name="workflow_run_state", opclasses=["jsonb_path_ops"]
            ),
        ),
    ]
