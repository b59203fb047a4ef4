"""At most one queued message per piece of work (issue #45): ``enqueued_until``, the lease of
the message in flight for an outbox intent and for a bulk operation being resumed, which the
sweep reads before it sends another. Nullable columns without a default: adding them rewrites
nothing and locks each table only briefly."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0026_task_inbox_order"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxintent",
            name="enqueued_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="bulkoperation",
            name="enqueued_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
