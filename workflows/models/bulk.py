"""Bulk operations: one action (cancel, retry, signal) over many runs, applied in the background.

Recorded like a migration: the runs are frozen when the operation is created (one
``BulkOperationItem`` per run, selected by a filter or by ids), so the selection never grows
or shrinks afterwards; a Celery task then applies the action in bounded batches, each batch
its own transaction. The items are the truth: an item leaves ``PENDING`` in the same
transaction that applied (or refused) the action on its run, so a lost or repeated message or
a killed worker never applies it twice nor skips it. The record stays as the audit trail: who,
when, why, what was selected, and each run's outcome.
"""

from __future__ import annotations

from django.db import models

from workflows.models.actors import ActorColumns
from workflows.models.fields import json_field


class BulkAction(models.TextChoices):
    CANCEL = "cancel"
    RETRY = "retry"
    SIGNAL = "signal"


class BulkOperationStatus(models.TextChoices):
    PENDING = "PENDING"  # frozen, no batch applied yet
    RUNNING = "RUNNING"  # some items have an outcome, some are left
    DONE = "DONE"  # every item has an outcome


class BulkItemStatus(models.TextChoices):
    PENDING = "PENDING"  # not applied yet (or a transient failure, to be tried again)
    APPLIED = "APPLIED"  # cancelled / RETRY recorded / SIGNAL recorded
    REFUSED = "REFUSED"  # the operation refused it for this run (e.g. the run had ended)
    FAILED = "FAILED"  # a transient failure that outlived its attempts


OPEN_BULK_STATUSES = (BulkOperationStatus.PENDING, BulkOperationStatus.RUNNING)


class BulkOperation(ActorColumns):
    """One action over a frozen selection of runs; the actor columns say who asked for it
    (the actor every run's history gets)."""

    id = models.BigAutoField(primary_key=True)
    action = models.CharField(max_length=8, choices=BulkAction.choices)
    # how the runs were chosen: the list's filter (as the query parameters of GET /runs/) or ids
    selection = models.CharField(max_length=8, default="run_ids")
    filter = json_field(null=True, blank=True)
    signal_name = models.CharField(max_length=255, blank=True, default="")
    signal_payload = json_field(null=True, blank=True)
    reason = models.CharField(max_length=1000, blank=True, default="")
    status = models.CharField(max_length=8, choices=BulkOperationStatus.choices, default=BulkOperationStatus.PENDING)
    total = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # the last progress (a batch committed): the sweep resumes an open record idle for too long
    updated_at = models.DateTimeField(auto_now_add=True)
    # until when the message the sweep sent to resume it is presumed queued (no second one before)
    enqueued_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "workflow_bulk_operations"
        indexes = [
            models.Index(
                fields=["updated_at"],
                name="workflow_bulk_open",
                condition=models.Q(status__in=list(OPEN_BULK_STATUSES)),
            )
        ]

    def __str__(self) -> str:
        return f"bulk {self.action} {self.id} ({self.total} runs)"


class BulkOperationItem(models.Model):
    """One run of a bulk operation and what became of it (a code and a value-free detail)."""

    id = models.BigAutoField(primary_key=True)
    operation = models.ForeignKey(
        BulkOperation,
        on_delete=models.CASCADE,
        related_name="items",
        db_index=False,  # (operation, run) is unique
    )
    run = models.ForeignKey("workflows.Run", on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=8, choices=BulkItemStatus.choices, default=BulkItemStatus.PENDING)
    code = models.CharField(max_length=64, blank=True, default="")  # the refusal's stable code
    detail = models.CharField(max_length=255, blank=True, default="")  # framework text, never a value
    command_id = models.BigIntegerField(null=True, blank=True)  # the RETRY or SIGNAL recorded
    attempts = models.PositiveSmallIntegerField(default=0)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "workflow_bulk_operation_items"
        constraints = [models.UniqueConstraint(fields=["operation", "run"], name="workflow_bulk_item_run")]
        indexes = [models.Index(fields=["operation", "status", "id"], name="workflow_bulk_item_todo")]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.status}"
