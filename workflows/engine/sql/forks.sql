-- name: branch_columns
id, run_id, fork_step, branch_id, generation, status, current_step, wait, state, result, attempts

-- name: fork_branches
SELECT {@branch_columns} FROM workflow_branches WHERE run_id = %s AND fork_step = %s ORDER BY id

-- name: find_branch
-- The latest generation of a branch, locked.
SELECT {@branch_columns} FROM workflow_branches WHERE run_id = %s AND branch_id = %s
ORDER BY id DESC LIMIT 1 FOR UPDATE

-- name: waiting_on_child
-- The branches of the run waiting at a call on the given child run, locked.
SELECT {@branch_columns} FROM workflow_branches
WHERE run_id = %s AND status = {BranchStatus.WAITING} AND wait->>'child' = %s
FOR UPDATE

-- name: save_branch
UPDATE workflow_branches SET status = %s, current_step = %s, wait = %s, state = %s, result = %s,
    attempts = %s, updated_at = now()
WHERE id = %s

-- name: join_base
SELECT base FROM workflow_joins WHERE run_id = %s AND fork_step = %s

-- name: withdraw_branch_tasks
UPDATE workflow_tasks SET status = {TaskStatus.WITHDRAWN}, reservation_owner = NULL, closed_at = now(),
    updated_at = now()
WHERE run_id = %s AND branch_id = %s AND status IN ({TaskStatus.OPEN}, {TaskStatus.COMPLETING})
RETURNING id, step

-- name: lock_join
SELECT id, join_step, policy, required, decided, base FROM workflow_joins
WHERE run_id = %s AND fork_step = %s FOR UPDATE

-- name: decide_join
-- Compare-and-set: the join is decided once.
UPDATE workflow_joins SET decided = true, outcome = %s, decided_at = now() WHERE id = %s AND NOT decided
