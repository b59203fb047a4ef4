-- Background apply of a migration record (engine/migration/background.py): the record handed
-- to a Celery task under a lease, paused, resumed and closed as partially applied.

-- name: start
-- Apply pressed: the record is applied in the background from now on. The lease stays with no
-- holder for one lease time (the task's message is on its way); then the sweep sends another.
-- A record a task already holds keeps its holder.
UPDATE workflow_migration_records SET status = {MigrationRecordStatus.APPLYING}, background = true,
    applied_at = coalesce(applied_at, now()),
    applied_by = CASE WHEN applied_by = '' THEN %s ELSE applied_by END,
    apply_actor = coalesce(apply_actor, %s::jsonb),
    lease_until = CASE WHEN lease_token = '' THEN clock_timestamp() + make_interval(secs => %s)
        ELSE lease_until END,
    updated_at = now()
WHERE id = %s AND status IN ({MigrationRecordStatus.PREVIEWED},{MigrationRecordStatus.APPLYING});

-- name: claim
-- A task takes the record: free (no holder) or its holder's lease lapsed (a killed worker).
-- A repeated or late message finds it held and does nothing.
UPDATE workflow_migration_records SET lease_token = %s,
    lease_until = clock_timestamp() + make_interval(secs => %s), updated_at = now()
WHERE id = %s AND status = {MigrationRecordStatus.APPLYING} AND background
    AND (lease_token = '' OR lease_until IS NULL OR lease_until < clock_timestamp())
RETURNING apply_actor;

-- name: renew
-- After each batch: the holder keeps the record (zero rows: paused, closed, done, or taken over).
UPDATE workflow_migration_records SET lease_until = clock_timestamp() + make_interval(secs => %s)
WHERE id = %s AND lease_token = %s AND status = {MigrationRecordStatus.APPLYING}
RETURNING id;

-- name: release
-- The holder lets go; the sweep looks at the record again once ``lease_until`` has passed
-- (one lease time when the holder's task sends the next message itself: "more").
UPDATE workflow_migration_records SET lease_token = '',
    lease_until = clock_timestamp() + make_interval(secs => %s)
WHERE id = %s AND lease_token = %s;

-- name: due
-- Records the sweep hands to a task: applying in the background with no live lease (a killed
-- worker's, a lost message's, or one whose last runs wait for the executor). Each is given to
-- the message the sweep sends after commit as the press gives it to its own: no holder, the
-- lease for one lease time, so the next sweeps send no second message while it is queued (a
-- lapsed holder's token goes: its renewal fails and it stops). SKIP LOCKED: a record a
-- transaction holds is left to the next sweep.
UPDATE workflow_migration_records SET lease_token = '',
    lease_until = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE id IN (
    SELECT id FROM workflow_migration_records
    WHERE status = {MigrationRecordStatus.APPLYING} AND background
        AND (lease_until IS NULL OR lease_until < clock_timestamp())
    ORDER BY lease_until NULLS FIRST LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: lock_record
SELECT id, status, background, total FROM workflow_migration_records WHERE id = %s FOR UPDATE;

-- name: pause
UPDATE workflow_migration_records SET status = {MigrationRecordStatus.PAUSED}, paused_by = %s,
    lease_token = '', lease_until = NULL, updated_at = now()
WHERE id = %s AND status = {MigrationRecordStatus.APPLYING};

-- name: resume
UPDATE workflow_migration_records SET status = {MigrationRecordStatus.APPLYING}, background = true,
    apply_actor = coalesce(apply_actor, %s::jsonb), lease_token = '',
    lease_until = clock_timestamp() + make_interval(secs => %s), updated_at = now()
WHERE id = %s AND status = {MigrationRecordStatus.PAUSED};

-- name: close
UPDATE workflow_migration_records SET status = {MigrationRecordStatus.CLOSED}, closed_by = %s,
    close_reason = %s, finished_at = now(), lease_token = '', lease_until = NULL, updated_at = now()
WHERE id = %s AND status IN ({MigrationRecordStatus.APPLYING},{MigrationRecordStatus.PAUSED});

-- name: close_items
-- The runs not applied when the record is closed: they stay where they are, marked so. Runs
-- already handed to the executor (RECORDED) keep their command and get its outcome.
UPDATE workflow_migration_items SET status = {MigrationItemStatus.NOT_APPLIED}, detail = 'CLOSED',
    updated_at = now()
WHERE record_id = %s AND status = {MigrationItemStatus.SELECTED};

-- name: frozen_elsewhere
-- Of the runs about to be frozen, those already open (SELECTED or RECORDED) in another record,
-- with that record: a run belongs to one open migration at a time.
SELECT i.record_id, r.status, count(*) FROM workflow_migration_items i
JOIN workflow_migration_records r ON r.id = i.record_id
WHERE i.status IN ({MigrationItemStatus.SELECTED},{MigrationItemStatus.RECORDED}) AND i.record_id <> %s
    AND i.run_id IN (SELECT p.run_id FROM workflow_parks p WHERE {where})
GROUP BY 1, 2 ORDER BY 1;
