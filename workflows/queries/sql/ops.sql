-- Operations: the dashboard, the stuck-run radar and the metrics gauges
-- (workflows/queries/ops.py). Every age and "overdue" is computed on the database clock
-- (now()), never the web node's.

-- name: run_columns
-- The run of a radar row.
r.id AS run_id, r.definition_id, r.scope, r.version, r.status AS run_status, r.current_step,
r.business_key, r.state_version, r.history_seq

-- name: queue_health
-- The command queue at a glance, over the unsettled/attention statuses only. One branch per
-- partial index (workflow_cmd_due, workflow_cmd_leases, workflow_cmd_attention): a single
-- `status IN (...)` over all of them matches none and scans the whole table, which grows with
-- every settled command.
WITH q AS (
    SELECT status, available_at, NULL::timestamptz AS lease_until FROM workflow_commands
    WHERE status IN ({CommandStatus.PENDING},{CommandStatus.DEFERRED})
    UNION ALL
    SELECT status, available_at, lease_until FROM workflow_commands WHERE status = {CommandStatus.CLAIMED}
    UNION ALL
    SELECT status, available_at, NULL FROM workflow_commands
    WHERE status IN ({CommandStatus.PARKED},{CommandStatus.DEAD},{CommandStatus.OUTCOME_UNKNOWN}))
SELECT count(*) FILTER (WHERE status = {CommandStatus.PENDING} AND available_at <= now()) AS pending,
    count(*) FILTER (WHERE status = {CommandStatus.PENDING} AND available_at > now()) AS scheduled,
    count(*) FILTER (WHERE status = {CommandStatus.DEFERRED}) AS deferred,
    count(*) FILTER (WHERE status = {CommandStatus.CLAIMED}) AS claimed,
    count(*) FILTER (WHERE status = {CommandStatus.CLAIMED} AND lease_until < now()) AS expired_leases,
    count(*) FILTER (WHERE status = {CommandStatus.PARKED}) AS parked,
    count(*) FILTER (WHERE status = {CommandStatus.DEAD}) AS dead,
    count(*) FILTER (WHERE status = {CommandStatus.OUTCOME_UNKNOWN}) AS outcome_unknown,
    coalesce(EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE status = {CommandStatus.PENDING}
        AND available_at <= now())), 0)::float AS oldest_pending_seconds, now() AS at
FROM q

-- name: runs_by_revision
-- Runs per revision and status: those not ended counted now (an index-only scan of the partial
-- index workflow_run_open: the cost follows the open runs, not the history), the ended ones
-- from the snapshot workflow_run_totals with its counted_at (NULL on the live rows); the plan
-- hash from the revision's row, not from a million runs.
WITH counts AS (
    SELECT definition_id, scope, version, status, count(*) AS runs, NULL::timestamptz AS counted_at
    FROM workflow_runs WHERE status IN ({OPEN_STATUSES}) GROUP BY definition_id, scope, version, status
    UNION ALL
    SELECT definition_id, scope, version, status, runs, counted_at FROM workflow_run_totals
    WHERE status IN ({ENDED_STATUSES}))
SELECT c.definition_id, c.scope, c.version, d.plan_hash, c.status, c.runs, c.counted_at FROM counts c
LEFT JOIN workflow_definitions d ON d.scope = c.scope AND d.definition_id = c.definition_id AND d.version = c.version
ORDER BY c.definition_id, c.scope, c.version DESC, c.status

-- name: settled_per_minute
-- Every minute of the window present, zeros included.
WITH s AS (SELECT date_trunc('minute', settled_at) AS minute, count(*) AS settled,
        count(*) FILTER (WHERE status = {CommandStatus.FAILED}) AS failed FROM workflow_commands
    WHERE settled_at >= date_trunc('minute', now()) - make_interval(mins => %s) GROUP BY 1)
SELECT g.minute, coalesce(s.settled, 0) AS settled, coalesce(s.failed, 0) AS failed
FROM generate_series(date_trunc('minute', now()) - make_interval(mins => %s), date_trunc('minute', now()),
    interval '1 minute') AS g(minute) LEFT JOIN s ON s.minute = g.minute ORDER BY g.minute

-- name: stuck_parks
-- Open parks of live runs past their position's threshold, most overdue first. Each radar
-- list carries total_rows: how many there are in all, beyond the LIMIT shown.
-- A position's threshold reads its latest %(sample)s closed waits of the window (the index
-- workflow_park_closed), only for the positions that have a park open (workflow_park_waiting):
-- the cost does not grow with the parks every ended run left behind.
WITH positions AS (SELECT DISTINCT definition_id, node FROM workflow_parks WHERE left_at IS NULL),
stats AS (SELECT pos.definition_id, pos.node, count(*) AS samples,
        percentile_cont(%(pct)s) WITHIN GROUP (ORDER BY w.seconds) AS typical
    FROM positions pos CROSS JOIN LATERAL (
        SELECT EXTRACT(EPOCH FROM c.left_at - c.since) AS seconds FROM workflow_parks c
        WHERE c.definition_id = pos.definition_id AND c.node = pos.node AND c.left_at IS NOT NULL
            AND c.left_at >= now() - make_interval(days => %(days)s) AND c.left_how NOT IN ('moved','cancelled')
        ORDER BY c.left_at DESC LIMIT %(sample)s) w
    GROUP BY pos.definition_id, pos.node),
open AS (SELECT p.id AS park_id, p.node, p.kind, p.branch_id, p.since,
        EXTRACT(EPOCH FROM now() - p.since)::float AS waited_seconds, s.samples, s.typical,
        coalesce((%(overrides)s::jsonb ->> (p.definition_id || ':' || p.node))::float,
            (%(overrides)s::jsonb ->> p.definition_id)::float, greatest(coalesce(s.typical, 0), %(floor)s))::float
        AS threshold_seconds, {@run_columns}
    FROM workflow_parks p JOIN workflow_runs r ON r.id = p.run_id
    LEFT JOIN stats s ON s.definition_id = p.definition_id AND s.node = p.node
    WHERE p.left_at IS NULL AND r.status IN ({LIVE_STATUSES}))
SELECT *, count(*) OVER () AS total_rows FROM open WHERE waited_seconds > threshold_seconds
ORDER BY waited_seconds / greatest(threshold_seconds, 1) DESC, park_id LIMIT %(limit)s

-- name: stuck_commands
-- Unsettled commands due for longer than the given seconds.
SELECT c.id AS command_id, c.kind, c.seq, c.status, c.attempts, c.deferral_count, c.last_error,
    c.recorded_at, EXTRACT(EPOCH FROM now() - greatest(c.available_at, c.recorded_at))::float AS stuck_seconds,
    count(*) OVER () AS total_rows,
    (c.status = {CommandStatus.CLAIMED} AND c.lease_until < now()) AS lease_expired, {@run_columns}
FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id
WHERE c.status IN ({CommandStatus.PENDING},{CommandStatus.DEFERRED},{CommandStatus.CLAIMED})
    AND greatest(c.available_at, c.recorded_at) < now() - make_interval(secs => %s)
ORDER BY greatest(c.available_at, c.recorded_at), c.id LIMIT %s

-- name: commands_in_status
SELECT c.id AS command_id, c.kind, c.seq, c.status, c.attempts, c.last_error, c.recorded_at,
    count(*) OVER () AS total_rows, {@run_columns}
FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id
WHERE c.status = %s ORDER BY c.recorded_at, c.id LIMIT %s

-- name: overdue_tasks
SELECT t.id AS task_id, t.title, t.step, t.assignment_mode, t.assignment_value, t.due_at,
    EXTRACT(EPOCH FROM now() - t.due_at)::float AS overdue_seconds, count(*) OVER () AS total_rows, {@run_columns}
FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id
WHERE t.status = {TaskStatus.OPEN} AND t.due_at < now() ORDER BY t.due_at, t.id LIMIT %s

-- name: task_counts
SELECT count(*) AS open, count(*) FILTER (WHERE status = {TaskStatus.OPEN} AND due_at < now()) AS overdue
FROM workflow_tasks WHERE status IN ({TaskStatus.OPEN},{TaskStatus.COMPLETING})

-- name: live_run_counts
SELECT status, count(*) AS runs FROM workflow_runs
WHERE status IN ({OPEN_STATUSES}) GROUP BY status

-- name: reconcile_candidate
-- A command with its run and the step of its latest effect marker.
SELECT c.id AS command_id, c.kind, c.seq, c.status, c.attempts, c.last_error, c.recorded_at,
    (SELECT m.step FROM workflow_effect_markers m WHERE m.command_id = c.id ORDER BY m.started_at DESC
        LIMIT 1) AS effect_step, {@run_columns}
FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id
WHERE c.id = %s
