-- Events out (engine/events.py): one outbox intent per (event, subscription), the delivery
-- log, redelivery.

-- name: record
-- The intents of a flush's events: one per event and active subscription that wants its type
-- (and its definition, when it names one); PENDING, or claimed for this process (inline
-- delivery). Answers the intents made as one JSON array (empty when no subscription matched).
WITH e AS (
    SELECT * FROM jsonb_to_recordset(%s) AS e(id text, type text, command_id bigint, step text, body jsonb)
), made AS (
    INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key,
        status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at)
    SELECT %s, e.command_id, e.step, 'EVENT', s.id::text, e.body, '{}'::jsonb, 'event:' || e.id || ':' || s.id,
        CASE WHEN %s THEN {OutboxIntent.Status.DELIVERING} ELSE {OutboxIntent.Status.PENDING} END,
        CASE WHEN %s THEN 1 ELSE 0 END, now(), '', now(),
        CASE WHEN %s THEN gen_random_uuid() END,
        CASE WHEN %s THEN now() + make_interval(secs => %s) END, NULL
    FROM e JOIN workflow_webhook_subscriptions s ON s.active AND s.events @> to_jsonb(e.type)
        AND (s.definition_id = '' OR s.definition_id = %s)
    ORDER BY e.id, s.id
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, step, command_id, target, idempotency_key, token, payload
)
SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'step', step, 'command_id', command_id, 'target', target,
    'key', idempotency_key, 'token', token, 'payload', payload) ORDER BY id), '[]'::jsonb) FROM made

-- name: subscription
-- What a delivery needs of its subscription; the secret a rotation replaced only while it
-- still signs (database clock).
SELECT id, url, active, owner, secret,
    CASE WHEN previous_secret_until > now() THEN previous_secret ELSE '' END AS previous_secret
FROM workflow_webhook_subscriptions WHERE id = %s

-- name: attempt
-- One attempt of a delivery, for the log.
INSERT INTO workflow_webhook_attempts (intent_id, subscription_id, event_id, at, status_code, error, duration_ms)
VALUES (%s, %s, %s, now(), %s, %s, %s)

-- name: redeliver
-- A delivery that is not being attempted right now goes out again (same payload, same
-- webhook-id), with a fresh budget of attempts.
UPDATE workflow_outbox SET status = {OutboxIntent.Status.PENDING}, attempts = 0, available_at = now(),
    last_error = '', token = NULL, lease_until = NULL, delivered_at = NULL
WHERE id = %s AND kind = 'EVENT'
    AND (status <> {OutboxIntent.Status.DELIVERING} OR lease_until < now())
RETURNING id

-- name: delivery
-- A delivery's kind and status (why a redelivery was refused).
SELECT kind, status FROM workflow_outbox WHERE id = %s
