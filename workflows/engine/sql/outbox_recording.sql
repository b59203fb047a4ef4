-- Intents recorded with the segment (engine/outbox/recording.py).

-- name: insert
-- An intent, PENDING or claimed for this process (inline delivery). A template: {lease} is
-- the claim's lease (str.format).
INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key,
    status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at)
VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,now(),'',now(),%s,{lease},NULL)
ON CONFLICT (idempotency_key) DO NOTHING RETURNING id

-- name: insert_notice
-- A task notice whose recipients are looked up in the same statement: delivered at once when
-- nobody can receive it, else PENDING, or claimed for this process (inline delivery). A
-- template: {recipients} is the recipient look-up (str.format).
INSERT INTO workflow_outbox (run_id, command_id, step, kind, target, payload, headers, idempotency_key,
    status, attempts, available_at, last_error, created_at, token, lease_until, delivered_at)
SELECT %s, %s, '', 'NOTIFY', %s, %s, %s, %s, CASE WHEN r.found THEN %s ELSE {OutboxIntent.Status.DELIVERED} END,
    CASE WHEN r.found THEN %s ELSE 0 END, now(), '', now(), CASE WHEN r.found THEN %s::uuid END,
    CASE WHEN r.found AND %s THEN now() + make_interval(secs => %s) END, CASE WHEN r.found THEN NULL ELSE now() END
FROM (SELECT EXISTS ({recipients}) AS found) r
ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, status

-- name: task_assignment
SELECT assignment_mode, assignment_value FROM workflow_tasks WHERE id = %s
