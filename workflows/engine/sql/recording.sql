-- Recording: the reads and writes of start, signal, task completion, reassignment, retry and
-- migration requests, in the caller's transaction.

-- name: dedup_find
-- The request recorded under an idempotency key.
SELECT fingerprint, run_id, command_id, result FROM workflow_dedup
WHERE kind = %s AND scope = %s AND key = %s

-- name: dedup_claim
-- Claim an idempotency key; no row when another request holds it.
INSERT INTO workflow_dedup (kind, scope, key, fingerprint, run_id, command_id, created_at)
VALUES (%s,%s,%s,%s,%s,%s,now()) ON CONFLICT (kind, scope, key) DO NOTHING RETURNING id

-- name: dedup_point
-- The dedup row names the command recorded under it.
UPDATE workflow_dedup SET command_id = %s WHERE kind = %s AND scope = %s AND key = %s

-- name: replayed_command
-- The command a replayed request recorded.
SELECT id, run_id, kind, status, seq FROM workflow_commands WHERE id = %s

-- name: start_admission
-- The chosen row's status as the insert sees it, and (above READ COMMITTED only) a key-share
-- lock of the row, so a status changed after the caller's snapshot fails to serialize.
admitted AS (SELECT status FROM workflow_definitions WHERE scope = %s AND definition_id = %s AND version = %s),
fence AS (SELECT 1 FROM workflow_definitions WHERE scope = %s AND definition_id = %s AND version = %s
  AND current_setting('transaction_isolation') <> 'read committed' FOR KEY SHARE)

-- name: start_run
-- The run row, inserted only when the admitted row is available; it already counts the
-- START's position (next_seq 2).
INSERT INTO workflow_runs (id, scope, definition_id, version, plan_hash, start_scope, status, state,
  state_version, current_step, wait, subject_type, subject_id, subject_version, business_key, context,
  failure_code, failure_message, parent_run_id, parent_step, parent_branch, call_depth, compensation,
  next_seq, open_signals, history_seq, cancel_reason, created_at, updated_at, ended_at, actor_kind, actor_id,
  actor_reason, on_behalf_of, attribution_status)
SELECT %s,%s,%s,%s,%s,%s,{RunStatus.PENDING},NULL,0,NULL,NULL,'','','',%s,%s,'','',%s,%s,%s,%s,NULL,2,0,0,'',
  now(),now(),NULL,%s,%s,%s,%s,%s
FROM admitted WHERE admitted.status = {DefinitionStatus.AVAILABLE} AND (SELECT count(*) FROM fence) >= 0
RETURNING id

-- name: start_answer
-- The START's row, or (none inserted) the admitted row's status.
SELECT c.id, c.recorded_at, c.available_at, c.fire_at, (SELECT status FROM admitted) AS admitted
FROM (SELECT 1) AS one LEFT JOIN c ON true

-- name: pinned_version
-- The version a run is pinned to.
SELECT version FROM workflow_runs WHERE id = %s

-- name: declared_signals
-- The signal names a version declares.
SELECT signal_names, contract_signals FROM workflow_definitions
WHERE scope = %s AND definition_id = %s AND version = %s

-- name: run_for_signal
-- The run a signal is sent to (read before the lock).
SELECT id, scope, definition_id, version, status FROM workflow_runs WHERE id = %s

-- name: raise_open_signals
-- Count one more open signal, within the run's limit.
UPDATE workflow_runs SET open_signals = open_signals + 1 WHERE id = %s AND open_signals < %s
RETURNING open_signals

-- name: task_for_completion
-- The task a completion decides (read before the lock).
SELECT id, run_id, status, decisions, assignment_mode, assignment_value, require_version_stability
FROM workflow_tasks WHERE id = %s

-- name: task_for_completion_locked
-- The same task, locked after its run.
{@task_for_completion} FOR UPDATE

-- name: reserve_task
-- The COMPLETION's task reserved by the command the statement's CTE c inserts.
t AS (UPDATE workflow_tasks SET status = {TaskStatus.COMPLETING}, reservation_owner = (SELECT id FROM c),
  updated_at = now() WHERE id = %s AND status = {TaskStatus.OPEN})

-- name: run_of_task
-- The run of a task to reassign (read before the lock).
SELECT id, run_id FROM workflow_tasks WHERE id = %s

-- name: task_to_reassign
-- The task, locked after its run.
SELECT id, step, status, branch_id FROM workflow_tasks WHERE id = %s FOR UPDATE

-- name: reassign_task
-- The task's new assignment.
UPDATE workflow_tasks SET assignment_mode = %s, assignment_value = %s, updated_at = now() WHERE id = %s

-- name: has_dead
-- Whether the run has a dead command to retry.
SELECT 1 FROM workflow_commands WHERE run_id = %s AND status = {CommandStatus.DEAD} LIMIT 1

-- name: unsettled
-- A run's unsettled commands (the open request of a kind).
status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.CLAIMED})

-- name: pending_retry
-- A RETRY the run has not settled yet (a repeated retry answers it).
SELECT id, kind, status, seq FROM workflow_commands WHERE run_id = %s AND kind = {CommandKind.RETRY}
  AND {@unsettled} ORDER BY seq LIMIT 1

-- name: pending_migration
-- A MIGRATION the run has not settled yet.
SELECT id, status, seq, target FROM workflow_commands WHERE run_id = %s AND kind = {CommandKind.MIGRATION}
  AND {@unsettled} ORDER BY seq LIMIT 1
