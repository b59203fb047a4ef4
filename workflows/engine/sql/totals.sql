-- The operations dashboard's snapshot of ended runs per revision and status
-- (workflows/engine/totals.py).

-- name: lock_totals
-- One refresh at a time: SHARE ROW EXCLUSIVE conflicts with itself and with every write, not
-- with reads, so the dashboard keeps reading the previous snapshot until the new one commits.
LOCK TABLE workflow_run_totals IN SHARE ROW EXCLUSIVE MODE

-- name: counted_at
-- When the stored snapshot was counted (NULL: none stored).
SELECT max(counted_at) FROM workflow_run_totals

-- name: clear_totals
DELETE FROM workflow_run_totals

-- name: count_ended
-- Ended runs per revision and status, stored with the time the count started (the rows it
-- saw are those committed by then); answers that time even when no run has ended.
WITH stored AS (
    INSERT INTO workflow_run_totals (definition_id, scope, version, status, runs, counted_at)
    SELECT definition_id, scope, version, status, count(*), statement_timestamp() FROM workflow_runs
    WHERE status IN ({ENDED_STATUSES}) GROUP BY definition_id, scope, version, status
    RETURNING 1)
SELECT statement_timestamp() AS counted_at, (SELECT count(*) FROM stored) AS revisions
