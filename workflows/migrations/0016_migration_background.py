"""Background apply of migration records (pause, resume, close) and one open record per run.

Before the constraint: the items a discarded preview left SELECTED end NOT_APPLIED, and where
a run is open (SELECTED or RECORDED) in more than one record, only its newest open item stays
open (a RECORDED one first); the others end NOT_APPLIED (detail SUPERSEDED).
"""

from django.db import migrations, models

import workflows.jsonvalues


class Migration(migrations.Migration):

    dependencies = [
        ('workflows', '0015_bulk_operations'),
    ]

    operations = [
        migrations.AddField(
            model_name='migrationrecord',
            name='apply_actor',
            field=models.JSONField(blank=True, decoder=workflows.jsonvalues.ExactDecoder, encoder=workflows.jsonvalues.ExactEncoder, null=True),
        ),
        migrations.AddField(
            model_name='migrationrecord',
            name='background',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='migrationrecord',
            name='close_reason',
            field=models.CharField(blank=True, default='', max_length=1000),
        ),
        migrations.AddField(
            model_name='migrationrecord',
            name='closed_by',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AddField(
            model_name='migrationrecord',
            name='lease_token',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AddField(
            model_name='migrationrecord',
            name='lease_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='migrationrecord',
            name='paused_by',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AlterField(
            model_name='migrationitem',
            name='status',
            field=models.CharField(choices=[('SELECTED', 'Selected'), ('RECORDED', 'Recorded'), ('MOVED', 'Moved'), ('CANCELLED', 'Cancelled'), ('ENDED', 'Ended'), ('MOVED_ON', 'Moved On'), ('REJECTED', 'Rejected'), ('NOT_APPLIED', 'Not Applied')], default='SELECTED', max_length=12),
        ),
        migrations.AlterField(
            model_name='migrationrecord',
            name='status',
            field=models.CharField(choices=[('PREVIEWED', 'Previewed'), ('APPLYING', 'Applying'), ('PAUSED', 'Paused'), ('DONE', 'Done'), ('CLOSED', 'Closed'), ('DISCARDED', 'Discarded')], default='PREVIEWED', max_length=12),
        ),
        migrations.RunSQL(
            """
            UPDATE workflow_migration_items i SET status = 'NOT_APPLIED', detail = 'DISCARDED', updated_at = now()
            FROM workflow_migration_records r
            WHERE r.id = i.record_id AND r.status = 'DISCARDED' AND i.status = 'SELECTED';
            UPDATE workflow_migration_items i SET status = 'NOT_APPLIED', detail = 'SUPERSEDED', updated_at = now()
            FROM (SELECT id, row_number() OVER (PARTITION BY run_id ORDER BY (status = 'RECORDED') DESC, id DESC) AS n
                  FROM workflow_migration_items WHERE status IN ('SELECTED', 'RECORDED')) d
            WHERE d.id = i.id AND d.n > 1;
            """,
            migrations.RunSQL.noop,
        ),
        migrations.AddConstraint(
            model_name='migrationitem',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['SELECTED', 'RECORDED'])), fields=('run',), name='workflow_migration_item_open_run'),
        ),
    ]
