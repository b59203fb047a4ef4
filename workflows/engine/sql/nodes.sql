-- name: delete_join
-- A fork entered again (a loop) starts a new generation of its branches and join.
DELETE FROM workflow_joins WHERE run_id = %s AND fork_step = %s

-- name: supersede_branches
UPDATE workflow_branches SET status = {BranchStatus.SUPERSEDED}, generation = generation + 1,
    branch_id = branch_id || '#' || id
WHERE run_id = %s AND fork_step = %s

-- name: insert_join
INSERT INTO workflow_joins (run_id, fork_step, join_step, policy, required, decided, outcome, base)
VALUES (%s,%s,%s,%s,%s,false,'',%s)

-- name: insert_branch
INSERT INTO workflow_branches (run_id, fork_step, branch_id, generation, status, current_step, wait, state, result,
                               attempts, created_at, updated_at)
VALUES (%s,%s,%s,1,{BranchStatus.RUNNING},%s,NULL,%s,NULL,0,now(),now())

-- name: insert_task
-- An approval opened by a human-task node.
INSERT INTO workflow_tasks (id, run_id, branch_id, step, title, description, task_type, assignment_mode,
                            assignment_value, status, decisions, require_version_stability, subject_version, due_at,
                            reminder_every_seconds, reminder_count, reservation_owner, decision, completed_by,
                            created_at, updated_at)
VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,{TaskStatus.OPEN},%s,%s,%s,NULL,%s,0,NULL,'','',now(),now())
