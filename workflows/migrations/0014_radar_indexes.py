# The stuck-run radar's indexes. Built CONCURRENTLY: on a large parks table a plain CREATE
# INDEX would block the engine's writes to it for as long as the build takes.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0013_run_state_gin"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="park",
            index=models.Index(
                condition=models.Q(("left_at__isnull", True)),
                fields=["definition_id", "node"],
                name="workflow_park_waiting",
            ),
        ),
        AddIndexConcurrently(
            model_name="park",
            index=models.Index(
                condition=models.Q(("left_at__isnull", False)),
                fields=["definition_id", "node", "left_at"],
                name="workflow_park_closed",
            ),
        ),
    ]
