"""EndedInstanceOutcomes: the one place that decides what becomes of a command that meets a
run that has ended or failed (used by the claim and by every segment)."""

from __future__ import annotations

EXECUTE, PARK, REJECT, STALE, CANCEL = "execute", "park", "reject", "stale", "cancel"

ENDED_OK = ("COMPLETED", "COMPENSATED", "EXPIRED")


def decide(kind: str, run_status: str, *, branch_addressed: bool = False, branch_ended: bool = False) -> str:
    if run_status == "CANCELLED":
        return CANCEL
    if run_status == "FAILED":
        if kind == "SIGNAL":
            return STALE if branch_addressed and branch_ended else PARK
        if kind in ("COMPLETION", "MIGRATION", "START"):
            return REJECT
        if kind in ("TIMER", "RESUME"):
            return STALE
        return EXECUTE  # RETRY
    if run_status in ENDED_OK:
        if kind == "SIGNAL" and branch_addressed:
            return STALE
        if kind in ("TIMER", "RESUME"):
            return STALE
        return REJECT
    return EXECUTE


# The same reason as ``reason(kind, "CANCELLED")``, composed in SQL from the command's own
# kind, for the statements that cancel every open command of a run at once.
CANCELLED_REASON_SQL = "'INSTANCE_CANCELLED: the run was cancelled (' || c.kind || ' not applied)'"


def reason(kind: str, run_status: str) -> str:
    if run_status == "CANCELLED":
        return f"INSTANCE_CANCELLED: the run was cancelled ({kind} not applied)"
    if run_status == "FAILED":
        return f"INSTANCE_FAILED: the run has failed ({kind.lower()} not applied)"
    if kind == "SIGNAL":
        return "INSTANCE_ENDED: instance ended"
    return f"INSTANCE_ENDED: the run has ended ({kind.lower()} not applied)"
