-- name: parked_signals
-- The run's parked signals, in queue order (the drain picks those the reached wait accepts).
SELECT id, seq, payload, target, recorded_at, actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status
FROM workflow_commands
WHERE run_id = %s AND status = {CommandStatus.PARKED} AND kind = {CommandKind.SIGNAL}
ORDER BY order_at, seq

-- name: requeue_parked
-- Parked signals back to PENDING, each at its own position, for segments of their own.
UPDATE workflow_commands SET status = {CommandStatus.PENDING}, available_at = now()
WHERE id = ANY(%s) AND status = {CommandStatus.PARKED}

-- name: parked_applied
UPDATE workflow_commands SET status = {CommandStatus.COMPLETE}, settled_at = now()
WHERE id = %s AND status = {CommandStatus.PARKED}

-- name: parked_rejected
UPDATE workflow_commands SET status = {CommandStatus.REJECTED}, settled_at = now(), last_error = %s
WHERE id = %s AND status = {CommandStatus.PARKED}
