-- The idle probe's reads ({run_filter}: one run's commands, or every run's; filled in per call).

-- name: columns
-- What the probe lists of a command.
id, run_id, kind, seq, status, available_at, recorded_at, last_error

-- name: runnable_count
-- Commands due now or being run.
SELECT count(*) FROM workflow_commands WHERE status IN ({CommandStatus.PENDING}, {CommandStatus.CLAIMED})
  AND available_at <= now() {run_filter}

-- name: deferred
-- Commands this node (or another) could not run yet.
SELECT {@columns} FROM workflow_commands WHERE status = {CommandStatus.DEFERRED} {run_filter} ORDER BY id

-- name: parked
-- Signals waiting for a wait that accepts them.
SELECT {@columns} FROM workflow_commands WHERE status = {CommandStatus.PARKED} {run_filter} ORDER BY id

-- name: not_yet_available
-- Commands due later (timers, backoffs).
SELECT {@columns} FROM workflow_commands WHERE status = {CommandStatus.PENDING} AND available_at > now()
  {run_filter} ORDER BY available_at

-- name: stuck
-- Dead commands, and unsettled ones older than the stuck threshold.
SELECT {@columns} FROM workflow_commands WHERE (status = {CommandStatus.DEAD}
  OR (status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.CLAIMED})
    AND recorded_at < now() - make_interval(secs => %s))) {run_filter} ORDER BY id
