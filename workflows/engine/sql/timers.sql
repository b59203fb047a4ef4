-- name: arm
-- A timer row and the TIMER command that fires it, in one statement. The ids of both rows are
-- drawn first, so the timer names its command and the command its timer without a second
-- write; the fire time is the database clock's. A due date also sets its task's due time.
WITH ids AS (
    SELECT nextval(pg_get_serial_sequence('workflow_timers', 'id')) AS timer_id,
           nextval(pg_get_serial_sequence('workflow_commands', 'id')) AS command_id
), t AS (
    INSERT INTO workflow_timers (id, run_id, command_id, kind, status, step, branch_id, task_id, fire_at,
                                 interval_seconds, context, created_at)
    SELECT ids.timer_id, %s, ids.command_id, %s, {Timer.Status.SCHEDULED}, %s, %s, %s,
           greatest(clock_timestamp() + make_interval(secs => %s), coalesce(%s, '-infinity'::timestamptz)), %s, NULL,
           now()
    FROM ids RETURNING id, fire_at
), c AS (
    INSERT INTO workflow_commands (id, run_id, seq, kind, timer_kind, status, payload, target, task_id,
                                   timer_id, dedup_key, fingerprint, attempts, transient_count, deferral_count,
                                   recorded_at, order_at, available_at, fire_at, claimed_by, last_error, context,
                                   was_parked, reconciled_by, reconcile_reason, reconcile_action, actor_kind,
                                   actor_id, actor_reason, on_behalf_of, attribution_status)
    SELECT ids.command_id, %s, %s, {CommandKind.TIMER}, %s, {CommandStatus.PENDING}, NULL,
           %s::jsonb || jsonb_build_object('timer', t.id), %s, t.id, '', '', 0, 0, 0, clock_timestamp(), t.fire_at,
           t.fire_at, t.fire_at, '', '', NULL, false, '', '', '', %s, %s, %s, %s, %s
    FROM ids, t RETURNING id
), d AS (
    UPDATE workflow_tasks SET due_at = t.fire_at FROM t WHERE workflow_tasks.id = %s
)
SELECT c.id, t.id, t.fire_at FROM c, t

-- name: rearmed
-- An existing timer row scheduled again, for the new TIMER command that fires it.
UPDATE workflow_timers SET command_id = %s, status = {Timer.Status.SCHEDULED} WHERE id = %s

-- name: to_rearm
-- A run that failed while it waited: the timers of its wait that failed, or whose command failed.
SELECT t.id, t.kind, t.step, t.branch_id, t.task_id, t.fire_at
FROM workflow_timers t LEFT JOIN workflow_commands c ON c.id = t.command_id
WHERE t.run_id = %s
  AND (t.status = {Timer.Status.FAILED}
       OR (t.status IN ({Timer.Status.SCHEDULED}, {Timer.Status.STALE})
           AND c.status IN ({CommandStatus.FAILED}, {CommandStatus.STALE})))

-- name: deadline_blocked
-- A signal recorded at or after its wait's timeout fire time, while the timeout is pending,
-- deferred, claimed or dead-lettered (or already fired).
SELECT 1 FROM workflow_timers t
WHERE t.id = %s AND t.fire_at <= %s
  AND (t.status = {Timer.Status.FIRED}
       OR EXISTS (SELECT 1 FROM workflow_commands c WHERE c.id = t.command_id
                  AND c.status IN ({CommandStatus.PENDING}, {CommandStatus.DEFERRED}, {CommandStatus.CLAIMED},
                                   {CommandStatus.DEAD})))

-- name: lock
SELECT id, command_id, kind, status, step, branch_id, task_id, fire_at, interval_seconds
FROM workflow_timers WHERE id = %s FOR UPDATE

-- name: stale
UPDATE workflow_timers SET status = {Timer.Status.STALE} WHERE id = %s

-- name: fired
UPDATE workflow_timers SET status = {Timer.Status.FIRED} WHERE id = %s

-- name: task_status
SELECT status FROM workflow_tasks WHERE id = %s

-- name: lock_task
SELECT id, status FROM workflow_tasks WHERE id = %s FOR UPDATE

-- name: expire_task
UPDATE workflow_tasks SET status = {TaskStatus.EXPIRED}, closed_at = now(), updated_at = now() WHERE id = %s

-- name: lock_reminded_task
SELECT id, status, step, assignment_mode, assignment_value FROM workflow_tasks WHERE id = %s FOR UPDATE

-- name: count_reminder
UPDATE workflow_tasks SET reminder_count = reminder_count + 1, updated_at = now() WHERE id = %s
RETURNING reminder_count

-- name: arm_many
-- Many timers at once (a bulk migration): the timer rows and their TIMER commands, with the ids
-- drawn before (each names the other), as `arm` writes one; a due date also sets its task's due
-- time to the fire time.
WITH f AS (SELECT v.*, greatest(clock_timestamp() + make_interval(secs => v.delay),
        coalesce(v.at, '-infinity'::timestamptz)) AS fire_at
    FROM unnest(%s::bigint[], %s::bigint[], %s::uuid[], %s::text[], %s::text[], %s::uuid[], %s::float8[],
        %s::timestamptz[], %s::float8[], %s::int[], %s::bool[])
        AS v(timer_id, command_id, run_id, kind, step, task_id, delay, at, interval_seconds, seq, due)),
t AS (INSERT INTO workflow_timers (id, run_id, command_id, kind, status, step, branch_id, task_id, fire_at,
        interval_seconds, context, created_at)
    SELECT f.timer_id, f.run_id, f.command_id, f.kind, {Timer.Status.SCHEDULED}, f.step, '', f.task_id, f.fire_at,
        f.interval_seconds, NULL, now() FROM f),
c AS (INSERT INTO workflow_commands (id, run_id, seq, kind, timer_kind, status, payload, target, task_id,
        timer_id, dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at,
        available_at, fire_at, claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason,
        reconcile_action, actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status)
    SELECT f.command_id, f.run_id, f.seq, {CommandKind.TIMER}, f.kind, {CommandStatus.PENDING}, NULL,
        jsonb_build_object('step', f.step, 'timer', f.timer_id), f.task_id, f.timer_id, '', '', 0, 0, 0,
        clock_timestamp(), f.fire_at, f.fire_at, f.fire_at, '', '', NULL, false, '', '', '', %s, %s, %s, %s, %s
    FROM f),
d AS (UPDATE workflow_tasks k SET due_at = f.fire_at FROM f WHERE k.id = f.task_id AND f.due)
SELECT f.run_id, f.fire_at FROM f;
