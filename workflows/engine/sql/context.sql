-- name: save_run
-- A drive's run row, written once at the end of its transaction.
UPDATE workflow_runs SET status=%s, state=%s, state_version=%s, current_step=%s, wait=%s,
    subject_type=%s, subject_id=%s, subject_version=%s, failure_code=%s, failure_message=%s,
    compensation=%s, next_seq=%s, open_signals=%s, history_seq=%s, cancel_reason=%s, ended_at=%s,
    scope=%s, version=%s, plan_hash=%s, updated_at=now()
WHERE id=%s
