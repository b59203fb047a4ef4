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

# Switchyard's tasks carry their own options, so a host needs no global Celery setting and its
# own tasks keep the host's (docs/install.md, step 4): no result stored; acknowledged after the
# task ran and re-queued when its worker dies (every task re-checks in the database, so a repeat
# is harmless).
OWN_OPTIONS = {"ignore_result": True, "acks_late": True, "reject_on_worker_lost": True}


@shared_task(name="capture.dispatch", **OWN_OPTIONS)
def dispatch(capture_id: int) -> str:
    close_old_connections()
    return dispatching.dispatch(int(capture_id))


@shared_task(name="capture.sweep", **OWN_OPTIONS, routine=True)  # quiet in the logs (workflows.tasks)
def sweep() -> int:
    from capture import recording

    close_old_connections()
    with transaction.atomic():  # one transaction for both reads, not one each (every 2 s)
        again = [cid for cid, status in dispatching.recover_expired() if status == "PENDING"]
        again += dispatching.stale_pending()
    for capture_id in again:
        recording.send(capture_id)
    return len(again)


@shared_task(name="capture.retention", **OWN_OPTIONS)
def retention() -> int:
    close_old_connections()
    return dispatching.purge_dispatched()
