-- Apply of a migration (engine/migration/apply.py): MIGRATION commands recorded for the
-- frozen items in bounded batches, and the record's progress.

-- name: lock_record
-- The record row serialises concurrent Apply presses (lock order: record, then runs).
SELECT id, scope, definition_id, source_version, target_version, target_scope, status, total
FROM workflow_migration_records WHERE id = %s FOR UPDATE;

-- name: next_items
SELECT id, run_id, source_node, action, target_node FROM workflow_migration_items
WHERE record_id = %s AND status = {MigrationItemStatus.SELECTED} ORDER BY id LIMIT %s;

-- name: settle_items
UPDATE workflow_migration_items i SET status = v.status, detail = v.detail,
    command_id = v.command_id, updated_at = now()
FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::text[]) AS status,
    unnest(%s::text[]) AS detail, unnest(%s::bigint[]) AS command_id) v
WHERE i.id = v.id AND i.status = {MigrationItemStatus.SELECTED};

-- name: mark_applying
UPDATE workflow_migration_records SET status = CASE WHEN status = {MigrationRecordStatus.PREVIEWED}
        THEN {MigrationRecordStatus.APPLYING} ELSE status END,
    applied_at = coalesce(applied_at, now()),
    applied_by = CASE WHEN applied_by = '' THEN %s ELSE applied_by END, updated_at = now()
WHERE id = %s;

-- name: migrations_pending
SELECT DISTINCT run_id FROM workflow_commands WHERE run_id = ANY(%s::uuid[]) AND kind = {CommandKind.MIGRATION}
    AND status IN ({CommandStatus.PENDING},{CommandStatus.DEFERRED},{CommandStatus.CLAIMED});

-- name: record_migrations
-- One MIGRATION command per run at the run's next queue position (the same row recording.migrate
-- writes), and the runs' queue counters moved on, in one statement.
WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::int[], %s::jsonb[]) AS v(run_id, seq, target)),
c AS (INSERT INTO workflow_commands (run_id, seq, kind, timer_kind, status, payload, target, task_id, timer_id,
        dedup_key, fingerprint, attempts, transient_count, deferral_count, recorded_at, order_at, available_at,
        fire_at, claimed_by, last_error, context, was_parked, reconciled_by, reconcile_reason, reconcile_action,
        actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status)
    SELECT v.run_id, v.seq, {CommandKind.MIGRATION}, '', {CommandStatus.PENDING}, NULL, v.target, NULL, NULL,
        '', '', 0, 0, 0, clock_timestamp(), clock_timestamp(), clock_timestamp(), NULL, '', '', NULL, false,
        '', '', '', %s, %s, %s, %s, %s FROM v RETURNING id, run_id),
u AS (UPDATE workflow_runs r SET next_seq = v.seq + 1, updated_at = now() FROM v WHERE r.id = v.run_id)
SELECT id, run_id FROM c;

-- name: settle_items_from_commands
-- Items whose command was settled without the handler (at the claim: the run had ended, failed
-- or was cancelled meanwhile) take their outcome from the command.
UPDATE workflow_migration_items i SET status = CASE WHEN c.status IN ({CommandStatus.CANCELLED},{CommandStatus.STALE})
        OR c.last_error LIKE 'INSTANCE_ENDED%%' THEN {MigrationItemStatus.MOVED_ON}
        ELSE {MigrationItemStatus.REJECTED} END,
    detail = left(split_part(c.last_error, ':', 1), 64), updated_at = now()
FROM workflow_commands c
WHERE i.record_id = %s AND i.status = {MigrationItemStatus.RECORDED} AND c.id = i.command_id
    AND c.status IN ({CommandStatus.REJECTED},{CommandStatus.STALE},{CommandStatus.CANCELLED},
        {CommandStatus.FAILED},{CommandStatus.DEAD});

-- name: record_status
SELECT status, total FROM workflow_migration_records WHERE id = %s;

-- name: item_counts
SELECT status, count(*) FROM workflow_migration_items WHERE record_id = %s GROUP BY status;

-- name: finish_record
UPDATE workflow_migration_records SET status = {MigrationRecordStatus.DONE}, finished_at = now(), updated_at = now(),
    lease_token = '', lease_until = NULL
WHERE id = %s AND status IN ({MigrationRecordStatus.APPLYING},{MigrationRecordStatus.PAUSED});
