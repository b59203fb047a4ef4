from django.db import migrations

# A segment's last statement settles its command fenced on the claim token, writes its history
# and the run row, and commits in the same round trip. The settlement must have updated exactly
# one row (the claim still stands); when it did not, this raises, the transaction is aborted and
# the COMMIT that follows in the pipeline rolls everything back.
FENCE = """
CREATE FUNCTION workflow_claim_fence(settled bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF settled <> 1 THEN
        RAISE EXCEPTION 'the claim no longer stands' USING ERRCODE = 'WF001';
    END IF;
    RETURN settled;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("workflows", "0008_park_counts")]

    operations = [
        migrations.RunSQL(FENCE, reverse_sql="DROP FUNCTION workflow_claim_fence(bigint);"),
    ]
