-- name: task_completed
UPDATE workflow_tasks SET status = {TaskStatus.COMPLETED}, decision = %s, completed_by = %s, closed_at = now(),
    updated_at = now()
WHERE id = %s
