-- The preview of a migration (engine/migration/preview.py): the selection frozen as a
-- PREVIEWED record and its items, and what Apply will do per row.

-- name: revision
SELECT version, status, contract, failure, plan_hash FROM workflow_definitions
WHERE scope = %s AND definition_id = %s AND version = %s;

-- name: insert_record
INSERT INTO workflow_migration_records (scope, definition_id, source_version, target_version,
    target_scope, created_by, reason, status, rows, total, created_at, applied_by, updated_at,
    background, lease_token, paused_by, closed_by, close_reason, notify_digest)
VALUES (%s,%s,%s,%s,%s,%s,%s,{MigrationRecordStatus.PREVIEWED},'[]',0,now(),'',now(),false,'','','','',%s)
RETURNING id;

-- name: record_rows
UPDATE workflow_migration_records SET rows = %s, total = %s WHERE id = %s;

-- name: discard
-- Abandon a preview that was never applied (its frozen runs are released: see discard_items).
UPDATE workflow_migration_records SET status = {MigrationRecordStatus.DISCARDED}, updated_at = now()
WHERE id = %s AND status = {MigrationRecordStatus.PREVIEWED};

-- name: discard_items
UPDATE workflow_migration_items SET status = {MigrationItemStatus.NOT_APPLIED}, detail = 'DISCARDED',
    updated_at = now()
WHERE record_id = %s AND status = {MigrationItemStatus.SELECTED};

-- name: facts_tasks
-- Per frozen row, the main path's open approvals by assignee (what a move withdraws).
SELECT i.row, t.assignment_mode, t.assignment_value, count(*) FROM workflow_migration_items i
JOIN workflow_tasks t ON t.run_id = i.run_id AND t.branch_id = ''
    AND t.status IN ({TaskStatus.OPEN},{TaskStatus.COMPLETING})
WHERE i.record_id = %s AND i.status = {MigrationItemStatus.SELECTED}
GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC;

-- name: facts_timers
-- Per frozen row, the main path's armed timers by kind (what a move disarms).
SELECT i.row, t.kind, count(*) FROM workflow_migration_items i JOIN workflow_timers t ON t.run_id = i.run_id
    AND t.status = {Timer.Status.SCHEDULED} AND t.branch_id = ''
WHERE i.record_id = %s AND i.status = {MigrationItemStatus.SELECTED}
GROUP BY 1, 2 ORDER BY 1, 2;

-- name: facts_counts
SELECT row, status, count(*) FROM workflow_migration_items WHERE record_id = %s GROUP BY 1, 2;

-- name: freeze_items
-- The runs of one row frozen as SELECTED items. A template: {where} is the row's selection
-- over the open parks "p" (str.format).
INSERT INTO workflow_migration_items (record_id, run_id, row, source_node, kind, action, target_node,
    status, command_id, detail)
SELECT %s, p.run_id, %s, p.node, p.kind, %s, %s, {MigrationItemStatus.SELECTED}, NULL, ''
FROM workflow_parks p WHERE {where} ON CONFLICT DO NOTHING
