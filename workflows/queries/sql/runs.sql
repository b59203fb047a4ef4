-- Reads about runs and the revisions they run (workflows/queries/runs.py).

-- name: trigger_revisions
-- The default scope's activation records joined with their AVAILABLE rows (a row whose text
-- never says "trigger" cannot declare one and is not built).
SELECT d.scope, d.definition_id, d.version, d.plan_hash FROM workflow_activations a
JOIN workflow_definitions d ON d.scope = a.target_scope AND d.definition_id = a.definition_id
    AND d.version = a.version
WHERE a.scope = 'default' AND d.status = {DefinitionStatus.AVAILABLE} AND strpos(d.text, 'trigger') > 0
ORDER BY d.definition_id

-- name: subject_types
-- Every distinct run subject type, read by skipping through the subject index (one probe per
-- type, however many runs there are).
WITH RECURSIVE t(v) AS (
    (SELECT subject_type FROM workflow_runs WHERE subject_type > '' ORDER BY subject_type LIMIT 1)
    UNION ALL SELECT (SELECT subject_type FROM workflow_runs WHERE subject_type > t.v
        ORDER BY subject_type LIMIT 1) FROM t WHERE t.v IS NOT NULL
) SELECT v FROM t WHERE v IS NOT NULL
