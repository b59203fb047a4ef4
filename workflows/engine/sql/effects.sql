-- Effect markers: a side effect started for a claim (committed on a connection of its own).

-- name: mark_started
-- A side effect of the claim's step is about to start.
INSERT INTO workflow_effect_markers (command_id, run_id, token, step, started_at) VALUES (%s, %s, %s, %s, now())

-- name: has_marker
-- Whether an effect started under this claim.
SELECT 1 FROM workflow_effect_markers WHERE command_id = %s AND token = %s LIMIT 1
