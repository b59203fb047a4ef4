-- name: park_columns
run_id, scope, definition_id, version, node, kind, branch_id, since, left_how, moved_to_scope, moved_to_node, moved_by

-- name: open_park
-- A park row for the wait being entered (answers its id).
INSERT INTO workflow_parks ({@park_columns})
VALUES (%s,%s,%s,%s,%s,%s,%s,now(),'','','','')
RETURNING id

-- name: open_park_drawn
-- The same, with an id drawn ahead (``draw_park_ids``): it answers nothing.
INSERT INTO workflow_parks (id, {@park_columns})
VALUES (%s,%s,%s,%s,%s,%s,%s,%s,now(),'','','','')

-- name: draw_park_ids
-- A block of park ids from the parks' own sequence.
SELECT array_agg(nextval(pg_get_serial_sequence('workflow_parks', 'id'))) FROM generate_series(1, %s)

-- name: close_park
UPDATE workflow_parks SET left_at = now(), left_how = %s, moved_to_version = %s, moved_to_scope = %s,
    moved_to_node = %s, moved_by = %s, migration_id = %s
WHERE id = %s AND left_at IS NULL
