-- The executor's statements: peeks, claims, settlements outside a segment, lease recovery.
-- {command_columns} is filled in from workflows.engine.rows; {run_filter} and {async_commit}
-- by the executor per use (see executor.py).

-- name: head_rule
-- A command (c) is a head when no earlier unsettled command of its run (e) blocks it. Due
-- dates and reminders of a task that is COMPLETING are held back and block nothing (the same
-- test for e and for c).
NOT EXISTS (SELECT 1 FROM workflow_commands e WHERE e.run_id = c.run_id
  AND e.status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.CLAIMED})
  AND (e.order_at, e.seq) < (c.order_at, c.seq)
  AND NOT (e.kind = {CommandKind.TIMER} AND e.timer_kind IN ({TimerKind.DUE}, {TimerKind.REMINDER})
    AND EXISTS (SELECT 1 FROM workflow_tasks t WHERE t.id = e.task_id AND t.status = {TaskStatus.COMPLETING})))
AND NOT (c.kind = {CommandKind.TIMER} AND c.timer_kind IN ({TimerKind.DUE}, {TimerKind.REMINDER})
  AND EXISTS (SELECT 1 FROM workflow_tasks t WHERE t.id = c.task_id AND t.status = {TaskStatus.COMPLETING}))

-- name: runnable
-- A command that is queued and due.
c.status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}) AND c.available_at <= now()

-- name: peek
-- Claimable heads, oldest first ({run_filter}: one run, or only heads old enough, or none).
SELECT c.id, c.run_id, c.kind, c.target, r.scope, r.definition_id, r.version, r.plan_hash, r.status AS run_status
FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id
WHERE {@runnable} {run_filter} AND {@head_rule}
ORDER BY c.available_at, c.id LIMIT %s

-- name: claim_fast
-- The one-statement claim: try-lock the live run, re-check the head, spend an attempt, token
-- and database-timed lease.
WITH r AS (SELECT id, {async_commit} FROM workflow_runs WHERE id = %s AND status IN ({LIVE_STATUSES})
  FOR NO KEY UPDATE NOWAIT)
UPDATE workflow_commands c SET status = {CommandStatus.CLAIMED}, attempts = c.attempts + 1, token = %s,
  claimed_by = %s, lease_until = now() + make_interval(secs => %s)
FROM r WHERE c.id = %s AND c.run_id = r.id AND {@runnable} AND c.attempts < %s AND {@head_rule}
RETURNING c.id

-- name: claim_run_head
-- A wake-up names a run: write the delivered marks this process carries (read first, so they
-- are written whatever the claim finds), try-lock the run, pick its head and claim it; one row
-- whatever happened: the claim, or why there is none (nothing runnable now, or a case for the
-- full path: an ended or failed run, a head whose attempts are spent).
WITH m AS (SELECT CASE WHEN cardinality(%(mark_ids)s::bigint[]) > 0 THEN
    workflow_outbox_delivered(%(mark_ids)s::bigint[], %(mark_tokens)s::uuid[]) END AS marked),
s AS (SELECT status FROM workflow_runs WHERE id = %(run)s),
r AS (SELECT id, scope, definition_id, version, plan_hash, status, {async_commit} FROM workflow_runs
  WHERE id = %(run)s AND status IN ({LIVE_STATUSES}) FOR NO KEY UPDATE NOWAIT),
h AS (SELECT c.id, c.attempts FROM workflow_commands c JOIN r ON r.id = c.run_id
  WHERE {@runnable} AND {@head_rule} ORDER BY c.order_at, c.seq LIMIT 1),
u AS (UPDATE workflow_commands c SET status = {CommandStatus.CLAIMED}, attempts = c.attempts + 1,
    token = %(token)s, claimed_by = %(by)s, lease_until = now() + make_interval(secs => %(lease)s)
  FROM r, h WHERE c.id = h.id AND h.attempts < %(max)s
  RETURNING c.id, c.run_id, c.kind, c.target, r.scope, r.definition_id, r.version, r.plan_hash,
    r.status AS run_status)
SELECT s.status AS status_now, (SELECT count(*) FROM h) AS heads, u.* FROM m LEFT JOIN s ON true
LEFT JOIN u ON true

-- name: head_for_claim
-- The full claim's head, locked under the run's lock.
SELECT {command_columns} FROM workflow_commands c WHERE c.id = %s AND {@runnable} AND {@head_rule} FOR UPDATE

-- name: claim
-- The full claim: spend an attempt, take the token and a database-timed lease.
UPDATE workflow_commands SET status = {CommandStatus.CLAIMED}, attempts = attempts + 1, token = %s,
  claimed_by = %s, lease_until = now() + make_interval(secs => %s)
WHERE id = %s

-- name: settle_at_claim
-- A head the full claim found rejected, stale or cancelled: settled there.
UPDATE workflow_commands SET status = %s, last_error = %s, settled_at = now(), token = NULL,
  lease_until = NULL
WHERE id = %s

-- name: dead_letter
-- A head whose attempts are spent.
UPDATE workflow_commands SET status = {CommandStatus.DEAD}, settled_at = now(), token = NULL,
  lease_until = NULL, last_error = %s
WHERE id = %s

-- name: defer
-- No attempt spent; 5 s doubling to 5 min.
UPDATE workflow_commands c SET status = {CommandStatus.DEFERRED}, deferral_count = deferral_count + 1,
  available_at = now() + make_interval(secs => least(300, 5 * power(2, deferral_count)))
WHERE c.id = %s AND {@runnable}
RETURNING deferral_count, kind, seq

-- name: release
-- A claim whose segment did not run, its attempt restored.
UPDATE workflow_commands SET status = {CommandStatus.PENDING}, attempts = greatest(attempts - 1, 0),
  token = NULL, lease_until = NULL, claimed_by = ''
WHERE id = %s AND status = {CommandStatus.CLAIMED} AND token = %s

-- name: retry_transient
-- A transient failure: the attempt given back, the command due again after a backoff.
UPDATE workflow_commands SET status = {CommandStatus.PENDING}, attempts = greatest(attempts - 1, 0),
  transient_count = transient_count + 1, token = NULL, lease_until = NULL, claimed_by = '', last_error = %s,
  available_at = now() + make_interval(secs => least(%s, %s * power(2, transient_count)) / 1000.0)
WHERE id = %s AND status = {CommandStatus.CLAIMED} AND token = %s
RETURNING transient_count

-- name: outcome_unknown
-- A failure after the command's effect started: an operator reconciles it.
UPDATE workflow_commands SET status = {CommandStatus.OUTCOME_UNKNOWN}, token = NULL, lease_until = NULL,
  last_error = 'OUTCOME_UNKNOWN: interrupted after its effect started; reconcile it'
WHERE id = %s AND status = {CommandStatus.CLAIMED} AND token = %s

-- name: claimed_command
-- The command a failing segment held, locked.
SELECT {command_columns} FROM workflow_commands WHERE id = %s AND status = {CommandStatus.CLAIMED}
  AND token = %s FOR UPDATE

-- name: fail_timer
-- The timer of a TIMER command that failed its run.
UPDATE workflow_timers SET status = {Timer.Status.FAILED} WHERE id = %s

-- name: fail_command
-- A command that failed deterministically.
UPDATE workflow_commands SET status = {CommandStatus.FAILED}, last_error = %s, token = NULL,
  lease_until = NULL, settled_at = now()
WHERE id = %s

-- name: recover_expired
-- Expired claims go back to PENDING (the attempt stays spent); one whose effect started is
-- OUTCOME_UNKNOWN.
WITH expired AS (SELECT c.id, c.run_id, c.kind, c.token FROM workflow_commands c
  WHERE c.status = {CommandStatus.CLAIMED} AND c.lease_until < now() FOR UPDATE SKIP LOCKED)
UPDATE workflow_commands c SET
  status = CASE WHEN EXISTS (SELECT 1 FROM workflow_effect_markers m
      WHERE m.command_id = c.id AND m.token = expired.token)
    THEN {CommandStatus.OUTCOME_UNKNOWN} ELSE {CommandStatus.PENDING} END,
  last_error = CASE WHEN EXISTS (SELECT 1 FROM workflow_effect_markers m
      WHERE m.command_id = c.id AND m.token = expired.token)
    THEN 'OUTCOME_UNKNOWN: interrupted after its effect started; reconcile it'
    ELSE 'LEASE_EXPIRED: the executor holding the claim stopped' END,
  token = NULL, lease_until = NULL, claimed_by = ''
FROM expired WHERE c.id = expired.id
RETURNING c.id, c.run_id, c.kind, c.status

-- name: queue_counts
-- Only the statuses the partial indexes cover: never a count over every settled command.
SELECT status, count(*) FROM workflow_commands
WHERE status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.CLAIMED},
  {CommandStatus.PARKED}, {CommandStatus.DEAD}, {CommandStatus.OUTCOME_UNKNOWN}, {CommandStatus.FAILED})
GROUP BY status
