-- Bulk operations (engine/bulk_ops.py): the frozen items, claimed in batches with SKIP LOCKED.

-- name: insert_items
-- One PENDING item per run of the frozen selection, in the order given.
INSERT INTO workflow_bulk_operation_items (operation_id, run_id, status, code, detail, attempts)
SELECT %s, r.id, {BulkItemStatus.PENDING}, '', '', 0
FROM unnest(%s::uuid[]) WITH ORDINALITY AS r(id, n)
ORDER BY r.n

-- name: operation
-- The operation's action, arguments and actor columns (what every batch applies, as whom).
SELECT id, action, signal_name, signal_payload, reason, status,
  actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status
FROM workflow_bulk_operations WHERE id = %s

-- name: claim_items
-- The next PENDING items, oldest first; items another batch holds are skipped, never waited for.
SELECT id, run_id, attempts FROM workflow_bulk_operation_items
WHERE operation_id = %s AND status = {BulkItemStatus.PENDING}
ORDER BY id
LIMIT %s
FOR UPDATE SKIP LOCKED

-- name: settle_items
-- The outcomes of a batch (a transient failure stays PENDING with one more attempt).
UPDATE workflow_bulk_operation_items i
SET status = o.status, code = o.code, detail = o.detail, command_id = o.command_id,
  attempts = o.attempts, updated_at = now()
FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::bigint[], %s::int[])
  AS o(id, status, code, detail, command_id, attempts)
WHERE i.id = o.id

-- name: progressed
-- A batch committed: the operation is RUNNING and its progress is fresh (the sweep leaves it).
UPDATE workflow_bulk_operations
SET status = {BulkOperationStatus.RUNNING}, started_at = coalesce(started_at, now()), updated_at = now()
WHERE id = %s AND status <> {BulkOperationStatus.DONE}

-- name: finish
-- DONE once no item is left PENDING (items another batch still holds count as left).
UPDATE workflow_bulk_operations o
SET status = {BulkOperationStatus.DONE}, started_at = coalesce(o.started_at, now()), finished_at = now(),
  updated_at = now()
WHERE o.id = %s AND o.status <> {BulkOperationStatus.DONE}
  AND NOT EXISTS (
    SELECT 1 FROM workflow_bulk_operation_items i
    WHERE i.operation_id = o.id AND i.status = {BulkItemStatus.PENDING}
  )
RETURNING o.id

-- name: stalled
-- Open operations without progress for longer than %(idle)s seconds (their worker died or
-- their message was lost), longest idle first, that have no resuming message queued: each is
-- given one (enqueued_until, leased for as long again; the caller sends it after commit), so
-- a backlog never piles up a message per sweep. One held by a batch (locked) is skipped.
UPDATE workflow_bulk_operations SET enqueued_until = now() + make_interval(secs => %(idle)s)
WHERE id IN (
    SELECT id FROM workflow_bulk_operations
    WHERE status IN ({OPEN_BULK_STATUSES}) AND updated_at < now() - make_interval(secs => %(idle)s)
        AND (enqueued_until IS NULL OR enqueued_until <= now())
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id

-- name: counts
-- The operation's items by status.
SELECT status, count(*) FROM workflow_bulk_operation_items WHERE operation_id = %s GROUP BY status
