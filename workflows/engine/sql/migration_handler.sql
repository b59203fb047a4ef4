-- The MIGRATION command's segment (engine/migration/handler.py).

-- name: leave_for_target
-- Admit the move and leave the old wait in one statement: the run has no active branches and
-- the target row is AVAILABLE and not marked failing (read under a share lock, so a retirement
-- or deprecation of the target cannot commit between this check and the re-pin); only then
-- close the park with where the run goes, withdraw the main path's approval and mark the
-- migration item MOVED (the segment's savepoint takes all of it back if entering the target
-- node fails). Also answers the withdrawn approvals' assignees and whether the migration
-- record asked for digests (``outbox.digest``).
WITH a AS (SELECT NOT EXISTS (SELECT 1 FROM workflow_branches WHERE run_id = %(run)s
        AND status IN ({BranchStatus.RUNNING},{BranchStatus.WAITING})) AS no_branches, d.status, d.failure
    FROM workflow_definitions d
    WHERE d.scope = %(scope)s AND d.definition_id = %(definition)s AND d.version = %(version)s FOR SHARE OF d),
ok AS (SELECT 1 FROM a WHERE a.no_branches AND a.status = {DefinitionStatus.AVAILABLE}
    AND coalesce(a.failure, '') = ''),
p AS (UPDATE workflow_parks SET left_at = now(), left_how = 'moved', moved_to_version = %(version)s,
        moved_to_scope = %(scope)s, moved_to_node = %(node)s, moved_by = %(by)s, migration_id = %(migration)s
    WHERE id = %(park)s AND left_at IS NULL AND EXISTS (SELECT 1 FROM ok) RETURNING id),
t AS (UPDATE workflow_tasks SET status = {TaskStatus.WITHDRAWN}, reservation_owner = NULL, closed_at = now(),
        updated_at = now()
    WHERE run_id = %(run)s AND branch_id = '' AND status IN ({TaskStatus.OPEN},{TaskStatus.COMPLETING})
        AND EXISTS (SELECT 1 FROM ok) RETURNING id, step, assignment_mode, assignment_value),
i AS (UPDATE workflow_migration_items SET status = {MigrationItemStatus.MOVED}, detail = '',
        command_id = %(command)s, updated_at = now()
    WHERE record_id = %(migration)s AND run_id = %(run)s AND EXISTS (SELECT 1 FROM ok) RETURNING id)
SELECT (SELECT no_branches FROM a), EXISTS (SELECT 1 FROM ok),
    coalesce((SELECT json_agg(json_build_object('id', t.id, 'step', t.step, 'assignment_mode', t.assignment_mode,
        'assignment_value', t.assignment_value)) FROM t), '[]'::json),
    (SELECT count(*) FROM p) + (SELECT count(*) FROM i),
    (SELECT notify_digest FROM workflow_migration_records WHERE id = %(migration)s);

-- name: parked_signals
-- The run's parked signals (the move rejects those the target never waits for).
SELECT id, target FROM workflow_commands
WHERE run_id = %s AND status = {CommandStatus.PARKED} AND kind = {CommandKind.SIGNAL};

-- name: reject_parked_signals
UPDATE workflow_commands SET status = {CommandStatus.REJECTED}, settled_at = now(),
    last_error = 'SIGNAL_REJECTED: the target revision never waits for this signal'
WHERE id = ANY(%s) AND status = {CommandStatus.PARKED};

-- name: settle_item
-- A migration item's outcome, written in the segment that settles its command.
UPDATE workflow_migration_items SET status = %s, detail = %s, command_id = %s, updated_at = now()
WHERE record_id = %s AND run_id = %s;
