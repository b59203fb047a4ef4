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

-- name: counted_positions
-- The open main-path parks per position ({where} over workflow_park_counts), less those of
-- FAILED runs ({failed_where} over their runs "r"): a subquery "c" of (definition_id, scope,
-- version, node, kind, runs) with runs > 0. A template (str.format).
(SELECT k.definition_id, k.scope, k.version, k.node, k.kind, k.runs - coalesce(f.runs, 0) AS runs FROM
    (SELECT definition_id, scope, version, node, kind, sum(runs) AS runs FROM workflow_park_counts
        WHERE {where} GROUP BY definition_id, scope, version, node, kind) k
    LEFT JOIN (SELECT p.definition_id, p.scope, p.version, p.node, p.kind, count(*) AS runs FROM workflow_runs r
        JOIN workflow_parks p ON p.run_id = r.id AND p.left_at IS NULL AND p.branch_id = ''
        WHERE r.status = {RunStatus.FAILED} AND {failed_where}
        GROUP BY p.definition_id, p.scope, p.version, p.node, p.kind) f
    ON (f.definition_id, f.scope, f.version, f.node, f.kind) = (k.definition_id, k.scope, k.version, k.node, k.kind)
    WHERE k.runs - coalesce(f.runs, 0) > 0) c
