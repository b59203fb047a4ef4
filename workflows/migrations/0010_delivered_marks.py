from django.db import migrations

# Delivered marks (a worker's carried marks, the flusher's batches) written by id and claim
# token. As one statement joined to unnest() the planner, prepared while the outbox was small
# (a new deployment, a benchmark), chose a hash join over a sequential scan of the whole outbox
# and kept that generic plan while the table grew: every claim then read every intent. Planned
# here with sequential scans disabled, the update is always an index look-up per mark.
MARKS = """
CREATE FUNCTION workflow_outbox_delivered(ids bigint[], tokens uuid[]) RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    marked integer;
BEGIN
    UPDATE workflow_outbox o SET status = 'DELIVERED', delivered_at = now(), token = NULL, lease_until = NULL
    FROM unnest(ids, tokens) AS x(id, token) WHERE o.id = x.id AND o.token = x.token;
    GET DIAGNOSTICS marked = ROW_COUNT;
    RETURN marked;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("workflows", "0009_claim_fence")]

    operations = [
        migrations.RunSQL(MARKS, reverse_sql="DROP FUNCTION workflow_outbox_delivered(bigint[], uuid[]);"),
    ]
