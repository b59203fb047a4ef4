from __future__ import annotations

import uuid

from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.actors import ActorColumns
from workflows.models.fields import json_field


class RunStatus(models.TextChoices):
    PENDING = "PENDING", _("Pending")
    RUNNING = "RUNNING", _("Running")
    WAITING = "WAITING", _("Waiting")
    COMPLETED = "COMPLETED", _("Completed")
    FAILED = "FAILED", _("Failed")
    CANCELLED = "CANCELLED", _("Cancelled")
    COMPENSATING = "COMPENSATING", _("Compensating")
    COMPENSATED = "COMPENSATED", _("Compensated")
    EXPIRED = "EXPIRED", _("Expired")


ENDED_STATUSES = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.COMPENSATED, RunStatus.EXPIRED)
LIVE_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.COMPENSATING)
# not ended: the live ones and FAILED (it waits for a retry or a cancel)
OPEN_STATUSES = (*LIVE_STATUSES, RunStatus.FAILED)


class Run(ActorColumns):
    """A workflow instance. Its row lock (FOR NO KEY UPDATE) is the execution lock.

    The per-instance queue counters (next command sequence, open-signal count, next
    history sequence) live on this row: they are only ever changed under that lock.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    scope = models.CharField(max_length=255, default="default")  # definition scope (pin)
    definition_id = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    plan_hash = models.CharField(max_length=64)
    start_scope = models.CharField(max_length=255, default="default")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PENDING)
    state = json_field(null=True, blank=True)
    state_version = models.PositiveIntegerField(default=0)
    # null until the first segment runs: a PENDING run has no step yet (queries show null)
    current_step = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    wait = json_field(null=True, blank=True)  # {"kind": "signal"|"timer"|"task"|"call"|"join", ...}
    subject_type = models.CharField(max_length=64, blank=True, default="")
    subject_id = models.CharField(max_length=255, blank=True, default="")
    subject_version = models.CharField(max_length=64, blank=True, default="")
    business_key = models.CharField(max_length=255, blank=True, default="")
    context = json_field(null=True, blank=True)
    failure_code = models.CharField(max_length=64, blank=True, default="")
    failure_message = models.CharField(max_length=4000, blank=True, default="")
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children", db_index=True
    )
    parent_step = models.CharField(max_length=255, blank=True, default="")
    parent_branch = models.CharField(max_length=255, blank=True, default="")
    call_depth = models.PositiveIntegerField(default=0)
    compensation = json_field(null=True, blank=True)  # completed steps with compensations, in order
    next_seq = models.PositiveIntegerField(default=1)
    open_signals = models.PositiveIntegerField(default=0)
    history_seq = models.PositiveIntegerField(default=0)
    cancel_reason = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        db_table = "workflow_runs"
        indexes = [
            models.Index(fields=["definition_id", "scope", "version", "status"], name="workflow_run_by_pin"),
            models.Index(fields=["status", "updated_at"], name="workflow_run_by_status"),
            models.Index(fields=["subject_type", "subject_id"], name="workflow_run_by_subject"),
            models.Index(fields=["start_scope", "definition_id", "business_key"], name="workflow_run_by_key"),
            # the API's ?business_key= alone (the index above needs the scope and definition first)
            models.Index(fields=["business_key"], name="workflow_run_business_key"),
            # the API's ?ordering=updated_at / -updated_at without a status (a status filter
            # uses workflow_run_by_status)
            models.Index(fields=["updated_at", "id"], name="workflow_run_by_updated"),
            # My requests: the runs a user started (queries.runs_started_by filters on both)
            models.Index(fields=["actor_kind", "actor_id"], name="workflow_run_by_actor"),
            # the API's ?state= search (JSON containment, state @> ...); jsonb_path_ops: smaller
            # and faster than the default operator class, and @> is all it has to serve
            GinIndex(fields=["state"], opclasses=["jsonb_path_ops"], name="workflow_run_state"),
            # the purge's candidates, oldest first; live runs (no ended_at) are not in it
            models.Index(fields=["ended_at"], name="workflow_run_ended", condition=models.Q(ended_at__isnull=False)),
            # the dashboard's live counts of the runs that are not ended, per revision and status:
            # an index-only scan of these rows alone, however many ended runs are kept
            models.Index(
                fields=["definition_id", "scope", "version", "status"],
                name="workflow_run_open",
                condition=models.Q(status__in=OPEN_STATUSES),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.definition_id} v{self.version} run {self.id}"

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES

    @property
    def subject(self) -> dict[str, str] | None:
        if not self.subject_type and not self.subject_id:
            return None
        return {"type": self.subject_type, "id": self.subject_id, "version": self.subject_version}


class RunTotal(models.Model):
    """Ended runs per revision and status, as counted at ``counted_at``: the operations
    dashboard's snapshot, replaced as a whole by the beat task ``workflows.run_totals``
    (``engine/totals.py``). Counting every run ever kept on each page load grows with the
    history; runs that are not ended are few and counted live, ended ones only change by
    ending (and by the retention purge), so a count a minute old says enough."""

    id = models.BigAutoField(primary_key=True)
    definition_id = models.CharField(max_length=255)
    scope = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    runs = models.BigIntegerField()
    counted_at = models.DateTimeField()

    class Meta:
        db_table = "workflow_run_totals"
        constraints = [
            models.UniqueConstraint(
                fields=["definition_id", "scope", "version", "status"], name="workflow_run_total_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.definition_id} v{self.version} {self.status}: {self.runs}"
