-- name: withdraw_tasks
-- Every open approval of the run, withdrawn or cancelled (the status is the parameter).
UPDATE workflow_tasks SET status = %s, reservation_owner = NULL, closed_at = now(), updated_at = now()
WHERE run_id = %s AND status IN ({TaskStatus.OPEN}, {TaskStatus.COMPLETING})
RETURNING id, step, branch_id

-- name: open_parks
EXISTS (SELECT 1 FROM workflow_parks WHERE run_id = %(r)s AND left_at IS NULL) AS parks

-- name: open_parks_beside_the_wait
-- ... but the park of the wait the run is in.
EXISTS (SELECT 1 FROM workflow_parks WHERE run_id = %(r)s AND left_at IS NULL
        AND id IS DISTINCT FROM (SELECT (wait->>'park')::bigint FROM workflow_runs WHERE id = %(r)s)) AS parks

-- name: open_timers
EXISTS (SELECT 1 FROM workflow_timers WHERE run_id = %(r)s AND status = {Timer.Status.SCHEDULED}) AS timers

-- name: open_tasks
EXISTS (SELECT 1 FROM workflow_tasks WHERE run_id = %(r)s AND status IN ({TaskStatus.OPEN}, {TaskStatus.COMPLETING}))
    AS tasks

-- name: open_rest
EXISTS (SELECT 1 FROM workflow_branches
        WHERE run_id = %(r)s AND status IN ({BranchStatus.RUNNING}, {BranchStatus.WAITING})) AS branches,
EXISTS (SELECT 1 FROM workflow_commands
        WHERE run_id = %(r)s AND status IN ({CommandStatus.PARKED}, {CommandStatus.DEAD})) AS settle,
EXISTS (SELECT 1 FROM workflow_runs WHERE parent_run_id = %(r)s AND status IN ({@live_child_statuses})) AS children

-- name: live_child_statuses
{RunStatus.PENDING}, {RunStatus.RUNNING}, {RunStatus.WAITING}, {RunStatus.COMPENSATING}, {RunStatus.FAILED}

-- name: open_things
-- What an ending run still holds, in one read, so the teardown writes only what it must.
SELECT {@open_parks}, {@open_timers}, {@open_tasks}, {@open_rest}

-- name: open_things_beside_the_decision
-- The same, but without the park of the wait the run is in and the task a COMPLETION decides:
-- read with the run's lock by a completion's segment (``locks.try_lock_run_with_command``), so
-- that a decision that ends the run knows what is left to tear down before the decision's own
-- writes — closing exactly those two — which then travel with the settlement (``waits.leave``).
SELECT {@open_parks_beside_the_wait}, {@open_timers},
EXISTS (SELECT 1 FROM workflow_tasks WHERE run_id = %(r)s AND status IN ({TaskStatus.OPEN}, {TaskStatus.COMPLETING})
        AND id IS DISTINCT FROM (SELECT task_id FROM workflow_commands WHERE id = %(c)s)) AS tasks,
{@open_rest}

-- name: claimed
run_id = %(r)s AND status = {CommandStatus.CLAIMED} AND token = %(t)s

-- name: open_things_beside_a_claimed_decision
-- The same for a segment that finds its command by its claim token (``locks.claim_and_lock``):
-- nothing (no row) unless that command is a COMPLETION.
SELECT * FROM (
    SELECT {@open_parks_beside_the_wait}, {@open_timers},
    EXISTS (SELECT 1 FROM workflow_tasks
            WHERE run_id = %(r)s AND status IN ({TaskStatus.OPEN}, {TaskStatus.COMPLETING})
            AND id IS DISTINCT FROM (SELECT task_id FROM workflow_commands WHERE {@claimed})) AS tasks,
    {@open_rest}
) o
WHERE EXISTS (SELECT 1 FROM workflow_commands WHERE {@claimed} AND kind = {CommandKind.COMPLETION})

-- name: leave_parks
UPDATE workflow_parks SET left_at = now(), left_how = %s WHERE run_id = %s AND left_at IS NULL

-- name: cancel_branches
UPDATE workflow_branches SET status = {BranchStatus.CANCELLED}, updated_at = now()
WHERE run_id = %s AND status IN ({BranchStatus.RUNNING}, {BranchStatus.WAITING})

-- name: settle_parked_and_dead
-- The run's PARKED and DEAD commands settled in one write (the status and reason are parameters).
WITH prior AS (
    SELECT id, status FROM workflow_commands
    WHERE run_id = %s AND status IN ({CommandStatus.PARKED}, {CommandStatus.DEAD})
    FOR UPDATE
)
UPDATE workflow_commands c SET status = %s, settled_at = now(), token = NULL, lease_until = NULL, last_error = %s
FROM prior WHERE c.id = prior.id
RETURNING c.id, c.kind, c.task_id, prior.status AS prior, c.actor_kind, c.actor_id, c.actor_reason, c.on_behalf_of,
          c.attribution_status

-- name: live_children
SELECT id FROM workflow_runs WHERE parent_run_id = %s AND status IN ({@live_child_statuses}) ORDER BY created_at

-- name: live_children_among
SELECT id FROM workflow_runs WHERE parent_run_id = %s AND status IN ({@live_child_statuses}) AND id = ANY(%s)
ORDER BY created_at

-- name: ancestors
-- The live runs above a run in its call chain, the topmost first.
WITH RECURSIVE up(id, depth) AS (
    SELECT parent_run_id, 1 FROM workflow_runs WHERE id = %s AND parent_run_id IS NOT NULL
    UNION ALL
    SELECT r.parent_run_id, up.depth + 1 FROM workflow_runs r JOIN up ON r.id = up.id
    WHERE r.parent_run_id IS NOT NULL AND up.depth < 100
)
SELECT up.id FROM up JOIN workflow_runs a ON a.id = up.id
WHERE a.status NOT IN ({ENDED_STATUSES})
ORDER BY up.depth DESC

-- name: branch_waits_on
SELECT 1 FROM workflow_branches WHERE run_id = %s AND status = {BranchStatus.WAITING} AND wait->>'child' = %s

-- name: cancelled_reason
-- The same reason as ``outcomes.reason(kind, "CANCELLED")``, composed from the command's own
-- kind, for the statements that cancel every open command of a run at once.
'INSTANCE_CANCELLED: the run was cancelled (' || c.kind || ' not applied)'

-- name: open_statuses
{CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.CLAIMED}, {CommandStatus.PARKED}, {CommandStatus.DEAD}

-- name: cancel_other_commands
-- Every open command of the run but the executing one (settled by its segment), cancelled.
WITH prior AS (
    SELECT id, status FROM workflow_commands WHERE run_id = %s AND id <> %s AND status IN ({@open_statuses})
    FOR UPDATE
)
UPDATE workflow_commands c SET status = {CommandStatus.CANCELLED}, settled_at = now(), token = NULL,
    lease_until = NULL, last_error = {@cancelled_reason}
FROM prior WHERE c.id = prior.id
RETURNING c.id, c.kind, prior.status AS prior

-- name: cancel_commands
-- Every open command of the run, cancelled.
WITH prior AS (
    SELECT id, status FROM workflow_commands WHERE run_id = %s AND status IN ({@open_statuses})
    FOR UPDATE
)
UPDATE workflow_commands c SET status = {CommandStatus.CANCELLED}, settled_at = now(), token = NULL,
    lease_until = NULL, last_error = {@cancelled_reason}
FROM prior WHERE c.id = prior.id
RETURNING c.id, c.kind, c.task_id, c.timer_id, prior.status AS prior
