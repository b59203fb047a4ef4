-- name: reopen_task
-- The task a rejected COMPLETION had reserved is open again.
UPDATE workflow_tasks SET status = {TaskStatus.OPEN}, reservation_owner = NULL, updated_at = now()
WHERE id = %s AND status = {TaskStatus.COMPLETING} AND reservation_owner = %s
