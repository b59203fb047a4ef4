-- name: requeue
-- A due date or reminder that met a COMPLETING task: back in the queue, attempt restored
-- (fenced on the claim).
UPDATE workflow_commands SET status = {CommandStatus.PENDING}, attempts = greatest(attempts - 1, 0), token = NULL,
    lease_until = NULL, claimed_by = ''
WHERE id = %s AND status = {CommandStatus.CLAIMED} AND token = %s

-- name: park
-- A signal its wait does not take yet: parked, attempt restored (fenced on the claim).
UPDATE workflow_commands SET status = {CommandStatus.PARKED}, was_parked = true,
    attempts = greatest(attempts - 1, 0), token = NULL, lease_until = NULL, claimed_by = ''
WHERE id = %s AND status = {CommandStatus.CLAIMED} AND token = %s

-- name: settle
-- The executing command settled (fenced on the claim).
UPDATE workflow_commands SET status = %s, last_error = %s, token = NULL, lease_until = NULL, settled_at = now()
WHERE id = %s AND status = {CommandStatus.CLAIMED} AND token = %s

-- name: branch_status
-- The latest generation of a branch.
SELECT status FROM workflow_branches WHERE run_id = %s AND branch_id = %s ORDER BY id DESC LIMIT 1

-- name: canceller
-- Who cancelled the run: the actor of its latest history entry of the type given (CANCELLED).
SELECT actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status FROM workflow_history
WHERE run_id = %s AND type = %s ORDER BY seq DESC LIMIT 1

-- name: cancel_task
-- The task of a COMPLETION that met a cancelled or ended run.
UPDATE workflow_tasks SET status = {TaskStatus.CANCELLED}, reservation_owner = NULL, closed_at = now(),
    updated_at = now()
WHERE id = %s AND status IN ({TaskStatus.OPEN}, {TaskStatus.COMPLETING})

-- name: timer_stale
-- The timer of a TIMER command that met an ended run.
UPDATE workflow_timers SET status = {Timer.Status.STALE} WHERE id = %s AND status = {Timer.Status.SCHEDULED}

-- name: lock_task
SELECT id, step, branch_id, status, reservation_owner FROM workflow_tasks WHERE id = %s FOR UPDATE

-- name: has_dead
SELECT 1 FROM workflow_commands WHERE run_id = %s AND status = {CommandStatus.DEAD} LIMIT 1

-- name: start_command
SELECT id, status, payload FROM workflow_commands WHERE run_id = %s AND kind = {CommandKind.START}
ORDER BY seq LIMIT 1

-- name: supersede
UPDATE workflow_commands SET status = {CommandStatus.SUPERSEDED}, settled_at = now() WHERE id = %s

-- name: reoffer_dead
-- A retry offers the run's dead-lettered commands again.
UPDATE workflow_commands SET status = {CommandStatus.PENDING}, attempts = 0, available_at = now(), last_error = ''
WHERE run_id = %s AND status = {CommandStatus.DEAD}
RETURNING kind
