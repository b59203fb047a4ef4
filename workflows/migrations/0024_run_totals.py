"""The operations dashboard's snapshot of ended runs per revision and status
(``workflow_run_totals``), replaced every minute by the beat task ``workflows.run_totals``: the
dashboard no longer counts every run ever kept on each load (``bench/bigtables.py``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0023_run_key_and_updated_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunTotal",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("definition_id", models.CharField(max_length=255)),
                ("scope", models.CharField(max_length=255)),
                ("version", models.PositiveIntegerField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("PENDING", "Pending"),
                            ("RUNNING", "Running"),
                            ("WAITING", "Waiting"),
                            ("COMPLETED", "Completed"),
                            ("FAILED", "Failed"),
                            ("CANCELLED", "Cancelled"),
                            ("COMPENSATING", "Compensating"),
                            ("COMPENSATED", "Compensated"),
                            ("EXPIRED", "Expired"),
                        ],
                        max_length=16,
                    ),
                ),
                ("runs", models.BigIntegerField()),
                ("counted_at", models.DateTimeField()),
            ],
            options={
                "db_table": "workflow_run_totals",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("definition_id", "scope", "version", "status"), name="workflow_run_total_key"
                    )
                ],
            },
        ),
    ]
