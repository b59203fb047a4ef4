-- name: purgeable_statuses
-- The statuses a purge may remove: the ended ones, and FAILED when %(failed)s (a failed run
-- can still be retried, so it is kept unless FAILED_RUNS_DAYS or --include-failed says so).
(r.status IN ({ENDED_STATUSES}) OR (r.status = {RunStatus.FAILED} AND %(failed)s))

-- name: candidates
-- One batch of runs to purge, oldest end first, locked; a run another transaction holds is
-- skipped (SKIP LOCKED), so two purges never wait on each other or take the same run.
-- %(horizon)s bounds ended_at (the partial index workflow_run_ended serves it); with
-- %(policy)s each run's age is then checked against its pinned version's retention_days,
-- else the site's days for its status (NULL keeps it: the comparison is not true).
-- A run is kept while a child of it (a call) remains, so children go first and a parent
-- follows in a later batch, and while its caller is still open (the caller resumes from it).
SELECT r.id FROM workflow_runs r
LEFT JOIN workflow_definitions d ON d.scope = r.scope AND d.definition_id = r.definition_id AND d.version = r.version
WHERE r.ended_at IS NOT NULL AND r.ended_at < %(horizon)s
  AND {@purgeable_statuses}
  AND (%(definition)s::text IS NULL OR r.definition_id = %(definition)s::text)
  AND (NOT %(policy)s OR r.ended_at < now() - make_interval(days => CASE WHEN r.status = {RunStatus.FAILED}
       THEN coalesce(d.retention_days, %(failed_days)s::int) ELSE coalesce(d.retention_days, %(ended_days)s::int) END))
  AND NOT EXISTS (SELECT 1 FROM workflow_runs c WHERE c.parent_run_id = r.id)
  AND (r.parent_run_id IS NULL OR EXISTS (
       SELECT 1 FROM workflow_runs p WHERE p.id = r.parent_run_id
       AND (p.status IN ({ENDED_STATUSES}) OR (p.status = {RunStatus.FAILED} AND %(failed)s))))
ORDER BY r.ended_at
LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED

-- name: shortest_override
-- The shortest per-version retention, which bounds how old a run the policy may purge is.
SELECT min(retention_days) FROM workflow_definitions WHERE retention_days IS NOT NULL

-- name: archive_lines
-- One JSON line per run: the run row and every row that references it, each table's rows
-- in their order. Built by the server (to_jsonb), so numbers and timestamps are exactly the
-- stored ones and jsonb_populate_record reads them back (restore).
SELECT jsonb_build_object(
  'format', 'switchyard.run-archive/1',
  'run', to_jsonb(r),
  'commands', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.seq), '[]') FROM workflow_commands x WHERE x.run_id = r.id),
  'history', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.seq), '[]') FROM workflow_history x WHERE x.run_id = r.id),
  'tasks', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.created_at, x.id), '[]') FROM workflow_tasks x WHERE x.run_id = r.id),
  'timers', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_timers x WHERE x.run_id = r.id),
  'parks', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_parks x WHERE x.run_id = r.id),
  'branches', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_branches x WHERE x.run_id = r.id),
  'joins', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_joins x WHERE x.run_id = r.id),
  'outbox', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_outbox x WHERE x.run_id = r.id),
  'effect_markers', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_effect_markers x
                     WHERE x.command_id IN (SELECT c.id FROM workflow_commands c WHERE c.run_id = r.id)),
  'segments', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_segment_log x WHERE x.run_id = r.id),
  'dedup', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_dedup x WHERE x.run_id = r.id),
  'migration_items', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_migration_items x WHERE x.run_id = r.id),
  'bulk_items', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_bulk_operation_items x WHERE x.run_id = r.id),
  'webhook_attempts', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.id), '[]') FROM workflow_webhook_attempts x
                       WHERE x.intent_id IN (SELECT o.id FROM workflow_outbox o WHERE o.run_id = r.id))
)::text
FROM workflow_runs r WHERE r.id = ANY(%s::uuid[]) ORDER BY r.ended_at, r.id

-- name: delete_rows
-- Every row of the batch's runs, then the runs (one statement; foreign keys are checked at
-- commit, so the order inside it does not matter). Answers the rows deleted per table, in the
-- order of retention.TABLES. Every foreign key that reaches a run is here (retention.REFERENCES):
-- bulk-operation items and webhook attempts (through the run's outbox intents) included.
WITH ids AS (SELECT unnest(%(ids)s::uuid[]) AS id),
markers AS (DELETE FROM workflow_effect_markers WHERE command_id IN
            (SELECT c.id FROM workflow_commands c WHERE c.run_id IN (SELECT id FROM ids)) RETURNING 1),
segments AS (DELETE FROM workflow_segment_log WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
dedup AS (DELETE FROM workflow_dedup WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
items AS (DELETE FROM workflow_migration_items WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
bulk_items AS (DELETE FROM workflow_bulk_operation_items WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
attempts AS (DELETE FROM workflow_webhook_attempts WHERE intent_id IN
             (SELECT o.id FROM workflow_outbox o WHERE o.run_id IN (SELECT id FROM ids)) RETURNING 1),
outbox AS (DELETE FROM workflow_outbox WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
timers AS (DELETE FROM workflow_timers WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
parks AS (DELETE FROM workflow_parks WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
tasks AS (DELETE FROM workflow_tasks WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
branches AS (DELETE FROM workflow_branches WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
joins AS (DELETE FROM workflow_joins WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
history AS (DELETE FROM workflow_history WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
commands AS (DELETE FROM workflow_commands WHERE run_id IN (SELECT id FROM ids) RETURNING 1),
runs AS (DELETE FROM workflow_runs WHERE id IN (SELECT id FROM ids) RETURNING 1)
SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM commands), (SELECT count(*) FROM history),
       (SELECT count(*) FROM tasks), (SELECT count(*) FROM timers), (SELECT count(*) FROM parks),
       (SELECT count(*) FROM branches), (SELECT count(*) FROM joins), (SELECT count(*) FROM outbox),
       (SELECT count(*) FROM markers), (SELECT count(*) FROM segments), (SELECT count(*) FROM dedup),
       (SELECT count(*) FROM items), (SELECT count(*) FROM bulk_items), (SELECT count(*) FROM attempts)

-- name: stored_runs
-- How many of a failed batch's runs are still stored (all of them: the batch rolled back).
SELECT count(*) FROM workflow_runs WHERE id = ANY(%s::uuid[])

-- name: expire_keys
-- One batch of idempotency keys older than the published schedule, oldest first; a key
-- another transaction holds (a repeat being answered) is skipped.
DELETE FROM workflow_dedup WHERE id IN (
  SELECT id FROM workflow_dedup WHERE created_at < now() - make_interval(days => %(days)s::int)
  ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)

-- name: unlink_missing_parents
-- Restored runs whose caller is not stored (purged and not restored): their link is dropped.
UPDATE workflow_runs r SET parent_run_id = NULL
WHERE r.id = ANY(%s::uuid[]) AND r.parent_run_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM workflow_runs p WHERE p.id = r.parent_run_id)

-- name: foreign_rows
-- Whether an archive line holds a row that is not its own run's (a tampered or spliced line):
-- a row of the named tables whose run_id is not the line's run, an effect marker of a
-- command the line does not hold, or a webhook attempt of an outbox intent it does not hold. Restore refuses such a line before inserting anything.
SELECT EXISTS (
    SELECT 1 FROM unnest(%(tables)s::text[]) AS t(name),
        jsonb_array_elements(CASE WHEN jsonb_typeof(%(line)s::jsonb -> t.name) = 'array'
            THEN %(line)s::jsonb -> t.name ELSE '[]'::jsonb END) AS r(row)
    WHERE (r.row ->> 'run_id') IS DISTINCT FROM (%(line)s::jsonb -> 'run' ->> 'id')
) OR EXISTS (
    SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(%(line)s::jsonb -> 'effect_markers') = 'array'
            THEN %(line)s::jsonb -> 'effect_markers' ELSE '[]'::jsonb END) AS m(row)
    WHERE NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(%(line)s::jsonb -> 'commands') = 'array'
            THEN %(line)s::jsonb -> 'commands' ELSE '[]'::jsonb END) AS c(row)
        WHERE c.row ->> 'id' = m.row ->> 'command_id'
    )
) OR EXISTS (
    SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(%(line)s::jsonb -> 'webhook_attempts') = 'array'
            THEN %(line)s::jsonb -> 'webhook_attempts' ELSE '[]'::jsonb END) AS a(row)
    WHERE NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(%(line)s::jsonb -> 'outbox') = 'array'
            THEN %(line)s::jsonb -> 'outbox' ELSE '[]'::jsonb END) AS o(row)
        WHERE o.row ->> 'id' = a.row ->> 'intent_id'
    )
)
