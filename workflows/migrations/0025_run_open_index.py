"""The dashboard's live counts of the runs that are not ended (``workflow_run_open``): a partial
index over those rows alone, so counting them per revision and status is an index-only scan
whose cost follows the open runs, not the million ended ones kept beside them (the planner
preferred a scan of all of ``workflow_run_by_pin`` to ``workflow_run_by_status`` plus heap reads).

Built CONCURRENTLY (outside a transaction), like 0019 and 0023: the runs table takes writes on
every step, and a plain CREATE INDEX would block them for as long as the build takes.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0024_run_totals"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status__in", ("PENDING", "RUNNING", "WAITING", "COMPENSATING", "FAILED"))),
                fields=["definition_id", "scope", "version", "status"],
                name="workflow_run_open",
            ),
        ),
    ]
