-- Operator repairs: reconciling an OUTCOME_UNKNOWN command, the moved-on check of a confirmed cancel.

-- name: command_run
-- The command's run (to lock it first).
SELECT id, run_id FROM workflow_commands WHERE id = %s

-- name: command_locked
-- The command, locked after its run.
SELECT id, run_id, kind, seq, status, target FROM workflow_commands WHERE id = %s FOR UPDATE

-- name: last_marker
-- The step of the command's latest effect marker.
SELECT step FROM workflow_effect_markers WHERE command_id = %s ORDER BY started_at DESC, id DESC LIMIT 1

-- name: requeue
-- Back to PENDING with its attempts reset, to replay or resolve.
UPDATE workflow_commands SET status = {CommandStatus.PENDING}, attempts = 0, transient_count = 0,
  available_at = now(), last_error = '', token = NULL, lease_until = NULL, claimed_by = '', target = %s,
  reconcile_action = %s, reconciled_by = %s, reconciled_at = now(), reconcile_reason = %s
WHERE id = %s AND status = {CommandStatus.OUTCOME_UNKNOWN}

-- name: stepped_since
-- A DECISION logged after the history the operator saw.
SELECT 1 FROM workflow_history WHERE run_id = %s AND seq > %s AND type = 'DECISION' LIMIT 1
