-- The history log's writes and the documents its redaction reads.

-- name: insert_into
-- The history table's columns, in the order the entry values fill them.
INSERT INTO workflow_history (run_id, seq, type, at, command_id, step, branch_id, outcome, scope,
  definition_id, version, plan_hash, state_version_before, state_version_after, executor_id, patch,
  payload, actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status, entry_version)

-- name: entry_values
-- Absent keys are NULL: the text columns a non-decision entry leaves empty are coalesced to ''.
e.seq, e.type, clock_timestamp(), e.command_id, e.step, e.branch_id, e.outcome,
  coalesce(e.scope, ''), coalesce(e.definition_id, ''), e.version, coalesce(e.plan_hash, ''), e.vb, e.va,
  coalesce(e.executor_id, ''), e.patch, e.payload, e.ak, e.ai, e.ar, e.ob, e.st, 2

-- name: entry_record
-- The record type of one buffered entry (jsonb_to_recordset).
seq integer, type text, command_id bigint, step text, branch_id text,
  outcome text, scope text, definition_id text, version integer, plan_hash text, vb integer, va integer,
  executor_id text, patch jsonb, payload jsonb, ak text, ai text, ar text, ob text, st text

-- name: history_insert
-- One run's buffered entries, as a jsonb array of records.
{@insert_into}
SELECT %s, {@entry_values}
FROM jsonb_to_recordset(%s) AS e({@entry_record})

-- name: history_insert_many
-- The entries of several runs (each row names its run): a bulk migration's decision logs.
{@insert_into}
SELECT e.run_id, {@entry_values}
FROM jsonb_to_recordset(%s) AS e(run_id uuid, {@entry_record})

-- name: command_documents
-- The documents of a command whose values redaction must know.
SELECT payload, target FROM workflow_commands WHERE id = %s
