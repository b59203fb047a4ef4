"""Reconciling a capture that dispatch could not settle: replay it, or close it as resolved.

Only for FAILED and OUTCOME_UNKNOWN captures, and only by an administrator. Before deciding,
inspect the capture, make sure the worker that held it has stopped (an OUTCOME_UNKNOWN from
the sweep means its lease expired) and check the other systems an effect may have reached:
a replay runs the whole captured event again.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from capture.models import UNRESOLVED, Capture, CaptureStatus
from workflows import access
from workflows.exceptions import InvalidPayload, Violation, WorkflowError

REASON_LIMIT = 1000


class NotAdministrator(WorkflowError):
    code = "PERMISSION_DENIED"
    status = 403
    title = "Permission denied"  # the title of PERMISSION_DENIED; the message says why


class CaptureNotFound(WorkflowError):
    code = "CAPTURE_NOT_FOUND"
    status = 404
    title = "Capture not found"


class ReconcileRefused(WorkflowError):
    code = "INVALID_TRANSITION"
    status = 409
    title = "Transition refused"  # the title of INVALID_TRANSITION; the message says why


def is_administrator(user: Any) -> bool:
    """Whether ``user`` holds the operate capability (``workflows.access``): an active
    superuser, or an active user with ``capture.reconcile_capture`` or ``workflows.change_command``."""
    return access.has(user, access.Capability.OPERATE)


def _clean_reason(reason: Any) -> str:
    text = "".join(ch for ch in str(reason or "") if ch.isprintable() or ch in "\n\t").strip()
    if not text:
        raise InvalidPayload(
            "a reason is required",
            violations=[Violation(pointer="/reason", type="required", message="give the reason for this decision")],
        )
    return text[:REASON_LIMIT]


def reconcile(*, capture_id: Any, replay: bool, reason: str, by: Any) -> Capture:
    """Replay (back to PENDING, dispatched again after commit) or resolve (RESOLVED) a capture.

    Who (``by``), when (database clock) and why (``reason``) stay on the capture. Runs in the
    caller's transaction when one is open. Refuses: PERMISSION_DENIED (not an administrator),
    INVALID_PAYLOAD (blank reason), CAPTURE_NOT_FOUND, INVALID_TRANSITION (a pending, active,
    dispatched or already resolved capture).
    """
    if not is_administrator(by):
        raise NotAdministrator("only administrators reconcile captures")
    text = _clean_reason(reason)
    with transaction.atomic():
        try:
            capture = Capture.objects.select_for_update().get(pk=capture_id)
        except (Capture.DoesNotExist, ValueError, TypeError):
            raise CaptureNotFound("capture not found") from None
        if capture.status not in UNRESOLVED:
            raise ReconcileRefused(
                f"capture {capture.pk} is {capture.status}: only FAILED and OUTCOME_UNKNOWN captures are reconciled"
            )
        updates: dict[str, Any] = {
            "reconciled_by": str(by.get_username())[:150],
            "reconciled_at": Now(),
            "reconcile_reason": text,
            "replayed": bool(replay),
            "updated_at": Now(),
        }
        if replay:
            updates.update(
                status=CaptureStatus.PENDING,
                attempts=0,
                replays=capture.replays + 1,
                available_at=Now(),
                claim_token=None,
                lease_until=None,
                effect_started_at=None,
            )
        else:
            updates.update(status=CaptureStatus.RESOLVED)
        Capture.objects.filter(pk=capture.pk).update(**updates)
        if replay:
            from capture import recording

            pk = capture.pk
            transaction.on_commit(lambda: recording.send(pk))
    capture.refresh_from_db()
    return capture
