"""EndedInstanceOutcomes: the one place that decides what becomes of a command that meets a
run that has ended or failed (used by the claim and by every segment)."""

from __future__ import annotations

from workflows.models import CommandKind, RunStatus

EXECUTE, PARK, REJECT, STALE, CANCEL = "execute", "park", "reject", "stale", "cancel"

ENDED_OK = (RunStatus.COMPLETED, RunStatus.COMPENSATED, RunStatus.EXPIRED)


def decide(kind: str, run_status: str, *, branch_addressed: bool = False, branch_ended: bool = False) -> str:
    if run_status == RunStatus.CANCELLED:
        return CANCEL
    if run_status == RunStatus.FAILED:
        if kind == CommandKind.SIGNAL:
            return STALE if branch_addressed and branch_ended else PARK
        if kind in (CommandKind.COMPLETION, CommandKind.MIGRATION, CommandKind.START):
            return REJECT
        if kind in (CommandKind.TIMER, CommandKind.RESUME):
            return STALE
        return EXECUTE  # RETRY
    if run_status in ENDED_OK:
        if kind == CommandKind.SIGNAL and branch_addressed:
            return STALE
        if kind in (CommandKind.TIMER, CommandKind.RESUME):
            return STALE
        return REJECT
    return EXECUTE


def reason(kind: str, run_status: str) -> str:
    if run_status == RunStatus.CANCELLED:
        return f"INSTANCE_CANCELLED: the run was cancelled ({kind} not applied)"
    if run_status == RunStatus.FAILED:
        return f"INSTANCE_FAILED: the run has failed ({kind.lower()} not applied)"
    if kind == CommandKind.SIGNAL:
        return "INSTANCE_ENDED: instance ended"
    return f"INSTANCE_ENDED: the run has ended ({kind.lower()} not applied)"
