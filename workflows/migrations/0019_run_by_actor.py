"""The index behind "My requests": the runs a user started (``actor_kind``, ``actor_id``;
``queries.runs_started_by`` and ``queries.requests_of``).

Built CONCURRENTLY (outside a transaction), like 0013: the runs table takes writes on every
step, and a plain CREATE INDEX would block them for as long as the build takes.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0018_retention_lifecycle"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(fields=["actor_kind", "actor_id"], name="workflow_run_by_actor"),
        ),
    ]
