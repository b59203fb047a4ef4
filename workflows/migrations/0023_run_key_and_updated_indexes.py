"""Indexes for the runs API at a million runs (``bench/bigtables.py``): ``?business_key=``
without a definition (``workflow_run_by_key`` starts with the scope and the definition) and
``?ordering=updated_at`` / ``-updated_at`` without a status filter, both sequential scans of
the whole table before.

Built CONCURRENTLY (outside a transaction), like 0019: the runs table takes writes on every
step, and a plain CREATE INDEX would block them for as long as the build takes.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0022_webhooks_subscriptions"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(fields=["business_key"], name="workflow_run_business_key"),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(fields=["updated_at", "id"], name="workflow_run_by_updated"),
        ),
    ]
