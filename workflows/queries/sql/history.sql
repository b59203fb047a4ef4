-- Reads of a run's history (workflows/queries/history.py).

-- name: path_taken
-- The step-to-step moves of a run's DECISION entries (per branch), each with its first seq.
SELECT prev, step, min(seq) AS first FROM (SELECT seq, step, lag(step) OVER (PARTITION BY branch_id
    ORDER BY seq) AS prev FROM workflow_history WHERE run_id = %s AND type = 'DECISION') moves
GROUP BY prev, step ORDER BY first
