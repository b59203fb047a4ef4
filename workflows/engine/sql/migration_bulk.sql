-- Set-based moves (engine/migration/bulk.py): the writes of a batch of MIGRATION segments,
-- one statement per kind of row.

-- name: target_available
-- The target row is AVAILABLE and not marked failing (a share lock: it cannot be retired or
-- deprecated before the batch commits).
SELECT 1 FROM workflow_definitions WHERE scope = %s AND definition_id = %s AND version = %s
    AND status = {DefinitionStatus.AVAILABLE} AND coalesce(failure, '') = '' FOR SHARE;

-- name: busy_runs
-- Runs whose MIGRATION command would not be the next thing applied to them: an approver's
-- completion, a due timer or any other command ahead of it in the queue (or parked), or
-- branches still running. Their commands are recorded, so the queue decides who comes first.
SELECT run_id FROM workflow_commands WHERE run_id = ANY(%s::uuid[]) AND (status = {CommandStatus.PARKED} OR
    (status IN ({CommandStatus.PENDING},{CommandStatus.DEFERRED},{CommandStatus.CLAIMED})
        AND order_at <= clock_timestamp()))
UNION SELECT run_id FROM workflow_branches WHERE run_id = ANY(%s::uuid[])
    AND status IN ({BranchStatus.RUNNING},{BranchStatus.WAITING});

-- name: allocate_ids
-- The ids of the batch's commands, parks and timers, drawn in one statement so every row (and
-- the history entries naming them) can be written without reading one back.
SELECT array(SELECT nextval(pg_get_serial_sequence('workflow_commands', 'id')) FROM generate_series(1, %s)),
    array(SELECT nextval(pg_get_serial_sequence('workflow_parks', 'id')) FROM generate_series(1, %s)),
    array(SELECT nextval(pg_get_serial_sequence('workflow_timers', 'id')) FROM generate_series(1, %s));

-- name: leaving_tasks
-- The main path's open approvals of the runs (what leaving withdraws).
SELECT id, run_id, step, assignment_mode, assignment_value FROM workflow_tasks WHERE run_id = ANY(%s::uuid[])
    AND branch_id = ''
    AND status IN ({TaskStatus.OPEN},{TaskStatus.COMPLETING}) ORDER BY run_id, created_at, id;

-- name: leaving_timers
-- The waits' armed timers (what leaving disarms).
SELECT id, run_id, command_id, step FROM workflow_timers WHERE id = ANY(%s) AND status = {Timer.Status.SCHEDULED}
ORDER BY run_id, id;

-- name: insert_commands
-- The batch's MIGRATION commands, recorded already settled (the Apply is their segment).
INSERT INTO workflow_commands (id, run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id,
    dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, available_at,
    fire_at, claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, reconcile_action,
    actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status, settled_at)
SELECT v.id, v.run_id, v.seq, {CommandKind.MIGRATION}, '', {CommandStatus.COMPLETE}, NULL, v.target, NULL, NULL,
    '', '', 1, 0, 0, clock_timestamp(), clock_timestamp(), clock_timestamp(), NULL, %s, '', NULL, false, '', '', '',
    %s, %s, %s, %s, %s, now()
FROM unnest(%s::bigint[], %s::uuid[], %s::int[], %s::jsonb[]) AS v(id, run_id, seq, target);

-- name: close_parks
UPDATE workflow_parks k SET left_at = now(), left_how = 'moved', moved_to_version = %s, moved_to_scope = %s,
    moved_to_node = v.node, moved_by = %s, migration_id = %s
FROM unnest(%s::bigint[], %s::text[]) AS v(id, node)
WHERE k.id = v.id AND k.left_at IS NULL;

-- name: withdraw_tasks
UPDATE workflow_tasks SET status = {TaskStatus.WITHDRAWN}, reservation_owner = NULL, closed_at = now(),
    updated_at = now()
WHERE id = ANY(%s::uuid[]) AND status IN ({TaskStatus.OPEN},{TaskStatus.COMPLETING});

-- name: open_parks
INSERT INTO workflow_parks (id, run_id, scope, definition_id, version, node, kind, branch_id, since, left_how,
    moved_to_scope, moved_to_node, moved_by)
SELECT v.id, v.run_id, %s, %s, %s, v.node, v.kind, '', now(), '', '', '', ''
FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::text[]) AS v(id, run_id, node, kind);

-- name: open_tasks
INSERT INTO workflow_tasks (id, run_id, branch_id, step, title, description, task_type, assignment_mode,
    assignment_value, status, decisions, require_version_stability, subject_version, due_at,
    reminder_every_seconds, reminder_count, reservation_owner, decision, completed_by, created_at, updated_at)
SELECT v.id, v.run_id, '', v.step, v.title, v.description, v.task_type, v.mode, v.value, {TaskStatus.OPEN},
    v.decisions, v.stable, v.subject_version, NULL, v.reminder, 0, NULL, '', '', now(), now()
FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
    %s::jsonb[], %s::bool[], %s::text[], %s::float8[])
    AS v(id, run_id, step, title, description, task_type, mode, value, decisions, stable, subject_version, reminder);

-- name: fire_times
SELECT id, fire_at FROM workflow_timers WHERE id = ANY(%s);

-- name: save_runs
UPDATE workflow_runs r SET status = v.status, current_step = v.current_step, wait = v.wait,
    next_seq = v.next_seq, history_seq = v.history_seq, scope = v.scope, version = v.version,
    plan_hash = v.plan_hash, updated_at = now()
FROM jsonb_to_recordset(%s) AS v(id uuid, status text, current_step text, wait jsonb, next_seq integer,
    history_seq integer, scope text, version integer, plan_hash text)
WHERE r.id = v.id;

-- name: notices
-- The opened approvals' notices, one statement per assignee: delivered at once when nobody can
-- receive them, else PENDING for the outbox (as the node's own notice statement). A template:
-- {recipients} is the outbox's recipient look-up (str.format, hence the doubled braces).
INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key,
    status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at)
SELECT v.run_id, v.command_id, '', 'NOTIFY', v.task, '{{"reason": "opened"}}'::jsonb, '{{}}'::jsonb,
    'notify:' || v.task || ':opened:0',
    CASE WHEN r.found THEN {OutboxIntent.Status.PENDING} ELSE {OutboxIntent.Status.DELIVERED} END, 0, now(), '',
    now(), NULL, NULL, CASE WHEN r.found THEN NULL ELSE now() END
FROM unnest(%s::uuid[], %s::bigint[], %s::text[]) AS v(run_id, command_id, task),
    (SELECT EXISTS ({recipients}) AS found) r
ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, status;
