"""The data lifecycle (retention, purge, archive): the per-version retention override and the
indexes the purge reads (ended runs by age, idempotency keys by age and by run).

The indexes are built CONCURRENTLY (outside a transaction): the runs table takes writes on
every step, and a plain CREATE INDEX would block them for as long as the build takes.
"""

import django.core.validators
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0017_migration_digest"),
    ]

    operations = [
        migrations.AddField(
            model_name="definitionversion",
            name="retention_days",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Days an ended run of this version is kept; empty: the site's retention setting.",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        AddIndexConcurrently(
            model_name="dedup",
            index=models.Index(fields=["created_at"], name="workflow_dedup_age"),
        ),
        AddIndexConcurrently(
            model_name="dedup",
            index=models.Index(
                condition=models.Q(("run_id__isnull", False)), fields=["run_id"], name="workflow_dedup_run"
            ),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("ended_at__isnull", False)), fields=["ended_at"], name="workflow_run_ended"
            ),
        ),
    ]
