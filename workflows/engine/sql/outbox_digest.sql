-- Migration digests (engine/outbox/digest.py): one intent per migration and assignee.

-- name: upsert
-- Count approvals a migration reopened for the same assignee: the first records the digest
-- (its key is the migration's and the assignee's), the next ones add to its count in the
-- same transaction as their move (a move rolled back takes its count back with it).
INSERT INTO workflow_outbox AS o (run_id, command_id, step, kind, target, payload, headers, idempotency_key,
    status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at)
VALUES (%s, %s, '', 'DIGEST', %s, %s, '{}'::jsonb, %s, {OutboxIntent.Status.PENDING}, 0,
    now() + make_interval(secs => %s), '', now(), NULL, NULL, NULL)
ON CONFLICT (idempotency_key) DO UPDATE SET payload = jsonb_set(o.payload, ARRAY['count'],
    to_jsonb((o.payload ->> 'count')::bigint + (EXCLUDED.payload ->> 'count')::bigint))
WHERE o.status <> {OutboxIntent.Status.DELIVERED}
RETURNING id

-- name: wanted
-- Whether a migration record asked for digests (no row: the record is gone).
SELECT notify_digest FROM workflow_migration_records WHERE id = %s

-- name: migration_open
-- Whether a migration still has runs to apply: selected and not yet applied, or recorded
-- with a MIGRATION command that has not settled.
SELECT 1 FROM workflow_migration_items i LEFT JOIN workflow_commands c ON c.id = i.command_id
WHERE i.record_id = %s AND (i.status = {MigrationItemStatus.SELECTED}
    OR (i.status = {MigrationItemStatus.RECORDED}
        AND (c.id IS NULL OR c.status IN ({CommandStatus.PENDING},{CommandStatus.DEFERRED},{CommandStatus.CLAIMED}))))
LIMIT 1

-- name: postpone
-- A digest whose migration still has runs to apply goes back to PENDING for a later look,
-- without spending a delivery attempt.
UPDATE workflow_outbox SET status = {OutboxIntent.Status.PENDING}, attempts = greatest(attempts - 1, 0),
    token = NULL, lease_until = NULL, available_at = now() + make_interval(secs => %s)
WHERE id = %s AND token = %s
