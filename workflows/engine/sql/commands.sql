-- name: insert_into
-- The columns of a command insert (``insert``, ``insert_at``, and ``insert_selected`` for
-- ``recording.start``).
INSERT INTO workflow_commands (run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id,
                               dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at,
                               order_at, available_at, fire_at, claimed_by, last_error, context, was_parked,
                               reconciled_by, reconcile_reason, reconcile_action, actor_kind, actor_id, actor_reason,
                               on_behalf_of, attribution_status)

-- name: insert_values
-- Its values up to the queue times.
%s,%s,%s,%s,{CommandStatus.PENDING},%s,%s,%s,%s,%s,%s,0,0,0,clock_timestamp(),

-- name: insert_rest
-- Its values after the queue times.
'','',%s,false,'','','',%s,%s,%s,%s,%s

-- name: insert_returning
RETURNING id, recorded_at, available_at, fire_at

-- name: insert
-- A command at the run's next position, queued now.
{@insert_into} VALUES (
{@insert_values}clock_timestamp(),clock_timestamp(),NULL,{@insert_rest}) {@insert_returning}

-- name: insert_selected
-- ``insert`` as an INSERT ... SELECT: ``recording.start`` adds the FROM of the run row it
-- inserts in the same statement, and ``insert_returning``.
{@insert_into} SELECT
{@insert_values}clock_timestamp(),clock_timestamp(),NULL,{@insert_rest}

-- name: insert_counted
-- The same as ``insert``, writing the run's queue counters (next sequence, open signals), as
-- CTEs: ``insert_counting`` answers the command, ``recording.complete`` adds one of its own.
WITH c AS ({@insert}), u AS (
    UPDATE workflow_runs SET next_seq = %s, open_signals = %s, updated_at = now() WHERE id = %s
)

-- name: insert_counting
-- ``insert``, writing the run's queue counters in the same statement.
{@insert_counted} SELECT * FROM c

-- name: insert_at
-- A command queued at a given time (a timer's TIMER command re-armed at its fire time).
{@insert_into} VALUES (
{@insert_values}%s,%s,%s,{@insert_rest}) {@insert_returning}

-- name: cancel_timers_update
-- Cancelling timers: the timers (the statements below give the WHERE clause), then their unsettled
-- TIMER commands, in one statement.
WITH t AS (UPDATE workflow_timers t SET status = {Timer.Status.CANCELLED} WHERE

-- name: cancel_timers_settle
RETURNING t.id, t.command_id, t.kind, t.step, t.branch_id, t.task_id),
c AS (
    UPDATE workflow_commands c SET status = {CommandStatus.CANCELLED}, token = NULL, lease_until = NULL,
        settled_at = now(), last_error = 'TIMER_CANCELLED: the wait was left'
    FROM t
    WHERE c.id = t.command_id
      AND c.status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.PARKED}, {CommandStatus.DEAD})
    RETURNING c.id
)
SELECT t.id, t.command_id, t.kind, t.step, t.branch_id, t.task_id, c.id IS NOT NULL AS settled
FROM t LEFT JOIN c ON c.id = t.command_id

-- name: cancel_timers_of_run
-- Every scheduled timer of a run.
{@cancel_timers_update} t.run_id = %s AND t.status = {Timer.Status.SCHEDULED} {@cancel_timers_settle}

-- name: cancel_timers_of_run_by_id
-- Scheduled timers of a run, by id.
{@cancel_timers_update} t.run_id = %s AND t.status = {Timer.Status.SCHEDULED} AND t.id = ANY(%s)
{@cancel_timers_settle}

-- name: cancel_timers_by_id
-- Scheduled timers of several runs, by id (the caller holds every run's lock).
{@cancel_timers_update} t.id = ANY(%s) AND t.status = {Timer.Status.SCHEDULED} {@cancel_timers_settle}
