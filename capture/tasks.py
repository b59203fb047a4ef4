"""Celery tasks of record capture: transport only, each carries an id or nothing.

- ``capture.dispatch`` — claim and dispatch one capture (a repeat finds nothing to claim).
- ``capture.sweep`` — beat backstop: expired claims (unmarked → PENDING and sent again,
  marked → OUTCOME_UNKNOWN) and PENDING captures whose message was lost.
- ``capture.retention`` — delete DISPATCHED captures older than RETAIN_DAYS.
"""

from __future__ import annotations

from celery import shared_task
from django.db import close_old_connections, transaction

from capture import dispatch as dispatching


@shared_task(name="capture.dispatch", ignore_result=True)
def dispatch(capture_id: int) -> str:
    close_old_connections()
    return dispatching.dispatch(int(capture_id))


@shared_task(name="capture.sweep", ignore_result=True, routine=True)  # quiet in the logs (workflows.tasks)
def sweep() -> int:
    from capture import recording

    close_old_connections()
    with transaction.atomic():  # one transaction for both reads, not one each (every 2 s)
        again = [cid for cid, status in dispatching.recover_expired() if status == "PENDING"]
        again += dispatching.stale_pending()
    for capture_id in again:
        recording.send(capture_id)
    return len(again)


@shared_task(name="capture.retention", ignore_result=True)
def retention() -> int:
    close_old_connections()
    return dispatching.purge_dispatched()
