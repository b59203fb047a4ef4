-- The execution lock: the run's row, FOR NO KEY UPDATE. {run_columns} and {command_columns}
-- are filled in from workflows.engine.rows.

-- name: lock_run
-- The bound is set (SET LOCAL) in the scan below the row lock, so it applies to this very
-- wait; the caller's own lock_timeout is kept aside first (left to right in the target list)
-- and restore_lock_timeout, sent in the same round trip right behind, puts it back: the bound
-- is the recording's, never the rest of the caller's transaction's.
SELECT set_config('workflows.caller_lock_timeout', current_setting('lock_timeout'), true) AS _kept,
  set_config('lock_timeout', %s, true) AS _bound, {run_columns} FROM workflow_runs
WHERE id = %s FOR NO KEY UPDATE

-- name: restore_lock_timeout
-- Nothing kept (no such run: the bound was never set) leaves lock_timeout alone; the kept
-- value is cleared, so a later recording of the transaction keeps the caller's value afresh.
SELECT set_config('lock_timeout', coalesce(nullif(current_setting('workflows.caller_lock_timeout', true), ''),
    current_setting('lock_timeout')), true) AS lock_timeout,
  set_config('workflows.caller_lock_timeout', '', true) AS _cleared

-- name: try_lock_run
-- The run, locked only if the lock is free (executor paths never wait).
SELECT {run_columns} FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE NOWAIT

-- name: lock_with_command
-- The segment's first statement: the deadline, the run try-locked, our claimed command (none
-- when the claim no longer stands) and, read under the lock, whether other commands of the
-- run are runnable (one recorded after this segment finds the lock free when its own wake-up
-- arrives).
SELECT set_config('statement_timeout', %s, true) AS _deadline, {run_columns},
  (SELECT row_to_json(c) FROM (SELECT {command_columns} FROM workflow_commands WHERE id = %s
    AND status = {CommandStatus.CLAIMED} AND token = %s) c) AS _command,
  EXISTS (SELECT 1 FROM workflow_commands e WHERE e.run_id = workflow_runs.id AND e.id <> %s
    AND e.status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}) AND e.available_at <= now()) AS _more
FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE NOWAIT

-- name: task_of_command
-- The task a COMPLETION reserves, locked after the run (lock order: run, then its tasks).
SELECT id, step, branch_id, status, reservation_owner FROM workflow_tasks
WHERE id = (SELECT task_id FROM workflow_commands WHERE id = %s) FOR UPDATE

-- name: claimed
-- The command holding the claim token (claim_and_lock).
run_id = %(r)s AND status = {CommandStatus.CLAIMED} AND token = %(t)s

-- name: lock_with_claimed
-- lock_with_command for a command found by its claim token.
SELECT set_config('statement_timeout', %(timeout)s, true) AS _deadline, {run_columns},
  (SELECT row_to_json(c) FROM (SELECT {command_columns} FROM workflow_commands WHERE {@claimed}) c) AS _command,
  EXISTS (SELECT 1 FROM workflow_commands e WHERE e.run_id = workflow_runs.id
    AND e.status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}) AND e.available_at <= now()) AS _more
FROM workflow_runs WHERE id = %(r)s FOR NO KEY UPDATE NOWAIT

-- name: task_of_claimed
-- task_of_command for a COMPLETION found by its claim token.
SELECT id, step, branch_id, status, reservation_owner FROM workflow_tasks
WHERE id = (SELECT task_id FROM workflow_commands WHERE {@claimed} AND kind = {CommandKind.COMPLETION}) FOR UPDATE
