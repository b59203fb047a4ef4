-- Where runs are parked (engine/migration/positions.py): the fragments the counts are built
-- from (the counts themselves take their WHERE clauses from Python).

-- name: not_failed
-- A park that is not a FAILED run's (over the parks "p").
NOT EXISTS (SELECT 1 FROM workflow_runs fr WHERE fr.id = p.run_id AND fr.status = {RunStatus.FAILED})

-- name: oldest_at_position
-- The oldest wait of a position "c" (the first entry of the partial index workflow_park_open).
(SELECT p.since FROM workflow_parks p WHERE p.left_at IS NULL AND p.branch_id = ''
    AND p.definition_id = c.definition_id AND p.scope = c.scope AND p.version = c.version AND p.node = c.node
    AND p.kind = c.kind AND {@not_failed} ORDER BY p.since LIMIT 1)
