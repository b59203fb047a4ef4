-- Delivery of intents after commit (engine/outbox/delivery.py): the claim, the delivered
-- marks, the retries.

-- name: claim
-- An intent that is due and unclaimed (or whose claim lapsed); compensations of one run go
-- out one at a time, in the order they were recorded. The claim consumes the message that
-- brought it (enqueued_until: none is queued any more, see due_intents).
UPDATE workflow_outbox o SET status = {OutboxIntent.Status.DELIVERING}, attempts = attempts + 1,
    token = gen_random_uuid(), lease_until = now() + make_interval(secs => %s), enqueued_until = now()
WHERE o.id = %s AND o.available_at <= now()
    AND (o.status = {OutboxIntent.Status.PENDING}
        OR (o.status = {OutboxIntent.Status.DELIVERING} AND o.lease_until < now()))
    AND NOT (o.kind = 'COMPENSATION' AND EXISTS (SELECT 1 FROM workflow_outbox e WHERE e.run_id = o.run_id
        AND e.kind = 'COMPENSATION' AND e.id < o.id
        AND e.status IN ({OutboxIntent.Status.PENDING},{OutboxIntent.Status.DELIVERING})))
RETURNING o.id, o.run_id, o.command_id, o.step, o.kind, o.target, o.payload, o.headers,
    o.idempotency_key, o.attempts, o.token

-- name: mark_delivered
-- A delivered mark commits asynchronously (one statement, outside any transaction): a mark lost
-- in a server crash leaves the intent DELIVERING until its lease lapses and it is delivered
-- again, which at-least-once delivery (receivers get the idempotency key) already allows.
-- A template: {async_commit} turns synchronous commit off when outside a transaction.
UPDATE workflow_outbox SET status = {OutboxIntent.Status.DELIVERED}, delivered_at = now(), token = NULL,
    lease_until = NULL
FROM (SELECT {async_commit}) s WHERE id = %s AND token = %s

-- name: mark_many
-- The carried marks, written in one asynchronous commit.
SELECT set_config('synchronous_commit', 'off', true), workflow_outbox_delivered(%s::bigint[], %s::uuid[])

-- name: failed
-- A failed attempt: PENDING again after a back-off, or DEAD.
UPDATE workflow_outbox SET status = %s, token = NULL, lease_until = NULL, last_error = %s,
    available_at = now() + make_interval(secs => %s)
WHERE id = %s AND token = %s

-- name: next_compensation
SELECT id FROM workflow_outbox WHERE run_id = %s AND kind = 'COMPENSATION' AND status = {OutboxIntent.Status.PENDING}
ORDER BY id LIMIT 1

-- name: notice_task
SELECT id, title, assignment_mode, assignment_value, status FROM workflow_tasks WHERE id = %s

-- name: due_intents
-- Every due intent (claimable now), whether a message for it is queued or not.
SELECT id FROM workflow_outbox
WHERE status IN ({OutboxIntent.Status.PENDING},{OutboxIntent.Status.DELIVERING}) AND available_at <= now()
    AND (status = {OutboxIntent.Status.PENDING} OR lease_until < now())
ORDER BY id LIMIT %s

-- name: intents_to_send
-- The sweep's due intents that have no delivery message queued, each given one: the message's
-- lease (enqueued_until) is taken here, in the sweep's transaction, and the messages are sent
-- after its commit. A message is presumed queued until its lease ends; the one sent after an
-- intent's own commit until created_at + the lease (its NULL). So every sweep sends at most one
-- message per intent and lease, however long the queue, and a lost one is sent again after
-- its lease. SKIP LOCKED: two sweeps at once take different intents.
UPDATE workflow_outbox SET enqueued_until = now() + make_interval(secs => %(lease)s)
WHERE id IN (
    SELECT id FROM workflow_outbox
    WHERE status IN ({OutboxIntent.Status.PENDING},{OutboxIntent.Status.DELIVERING}) AND available_at <= now()
        AND (status = {OutboxIntent.Status.PENDING} OR lease_until < now())
        AND coalesce(enqueued_until, created_at + make_interval(secs => %(lease)s)) <= now()
    ORDER BY id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id
