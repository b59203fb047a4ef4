"""Signals about dispatch, for observers (metrics, logs, tests).

- ``capture_claimed(capture_id, token)``: a dispatch holds the claim (its lease is being
  renewed) and is about to evaluate the triggers. A receiver runs inside the dispatch; one
  that raises fails the attempt.
- ``capture_settled(capture_id, status)``: the attempt ended (DISPATCHED, FAILED,
  OUTCOME_UNKNOWN, PENDING for a retry).
"""

from __future__ import annotations

from django.dispatch import Signal

capture_claimed = Signal()
capture_settled = Signal()
