-- The segment log (SWITCHYARD_SEGMENT_LOG): one row per segment, for the reliability checks.

-- name: segment_started
-- Open the segment's log row.
INSERT INTO workflow_segment_log (run_id, command_id, token, executor_id, started_at, outcome, claim_current)
VALUES (%s, %s, %s, %s, clock_timestamp(), '', false) RETURNING id

-- name: segment_settling
-- Whether the claim still stood as far as committed data shows.
UPDATE workflow_segment_log SET committed_at = clock_timestamp(), outcome = %s,
  claim_current = EXISTS (SELECT 1 FROM workflow_commands WHERE id = %s AND status = {CommandStatus.CLAIMED}
    AND token = %s)
WHERE id = %s
