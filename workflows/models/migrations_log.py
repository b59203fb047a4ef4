"""Migration records: every batch of parked runs moved from the Migrate dialog or the bulk API.

A record is created when the user previews a selection: the runs are frozen then (one
``MigrationItem`` per run), so Apply works on exactly what the preview showed. Apply records a
MIGRATION command per item, in bounded batches; the command's handler writes the item's
outcome in the segment that applied (or refused) it. The record stays as the audit trail:
who, when, why, source → target, the rows with their action and counts, and each run's
outcome.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.fields import json_field


class MigrationRecordStatus(models.TextChoices):
    PREVIEWED = "PREVIEWED", _("Previewed")  # runs frozen, nothing applied yet
    APPLYING = "APPLYING", _("Applying")  # some items recorded or applied, some left
    PAUSED = "PAUSED", _("Paused")  # the background apply was paused by an operator; resume continues it
    DONE = "DONE", _("Done")  # every item has an outcome
    CLOSED = "CLOSED", _("Closed")  # closed as partially applied (with a reason): the items left are NOT_APPLIED
    DISCARDED = "DISCARDED", _("Discarded")  # the preview was abandoned before Apply


class MigrationItemStatus(models.TextChoices):
    SELECTED = "SELECTED", _("Selected")  # frozen at preview, no command yet
    RECORDED = "RECORDED", _("Recorded")  # MIGRATION command recorded, not yet executed
    MOVED = "MOVED", _("Moved")
    CANCELLED = "CANCELLED", _("Cancelled")
    ENDED = "ENDED", _("Ended")
    MOVED_ON = "MOVED_ON", _("Moved On")  # an approver, a timer or another writer reached the run first
    REJECTED = "REJECTED", _("Rejected")  # the executor's checks refused it (the run is unchanged)
    NOT_APPLIED = "NOT_APPLIED", _("Not applied")  # left when the record was closed (or its preview discarded)


OPEN_ITEM_STATUSES = (MigrationItemStatus.SELECTED, MigrationItemStatus.RECORDED)
# a record whose SELECTED items may still be applied: their runs cannot be frozen into another
OPEN_RECORD_STATUSES = (MigrationRecordStatus.PREVIEWED, MigrationRecordStatus.APPLYING, MigrationRecordStatus.PAUSED)


class MigrationRecord(models.Model):
    """One applied (or previewed) migration of parked runs between two revisions."""

    id = models.BigAutoField(primary_key=True)
    scope = models.CharField(max_length=255)
    definition_id = models.CharField(max_length=255)
    source_version = models.PositiveIntegerField()
    target_version = models.PositiveIntegerField()
    target_scope = models.CharField(max_length=255)
    created_by = models.CharField(max_length=255, blank=True, default="")
    reason = models.CharField(max_length=500, blank=True, default="")
    status = models.CharField(
        max_length=12, choices=MigrationRecordStatus.choices, default=MigrationRecordStatus.PREVIEWED
    )
    # one entry per position row the user asked for: node, kind, action, target node, how
    # many runs were frozen and whether the whole position or a picked subset was selected
    rows = json_field(default=list)
    total = models.PositiveIntegerField(default=0)
    # moved runs whose approval reopens for the same assignees notify nobody, unless this asks
    # for one digest per such assignee (WORKFLOWS MIGRATE.DIGEST_NOTICES is the default)
    notify_digest = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    applied_by = models.CharField(max_length=255, blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Background apply (a Celery task applies the batches): the task holding the record renews
    # ``lease_until`` (database clock) after every batch; a record left APPLYING with its lease
    # lapsed (a killed worker, a lost message) is handed to a new task by the sweep.
    background = models.BooleanField(default=False)
    # who pressed Apply (kind, id, reason, on behalf of, status): the background batches'
    # commands and history are attributed to them, as a press's own batch is
    apply_actor = json_field(null=True, blank=True)
    lease_token = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=255, blank=True, default="")
    closed_by = models.CharField(max_length=255, blank=True, default="")
    close_reason = models.CharField(max_length=1000, blank=True, default="")

    class Meta:
        db_table = "workflow_migration_records"
        indexes = [models.Index(fields=["definition_id", "scope", "-created_at"], name="workflow_migration_by_def")]

    def __str__(self) -> str:
        return f"migration {self.id}: {self.definition_id} v{self.source_version} → v{self.target_version}"


class MigrationItem(models.Model):
    """One run of a migration record: where it was, what was asked, what became of it."""

    id = models.BigAutoField(primary_key=True)
    record = models.ForeignKey(
        MigrationRecord,
        on_delete=models.CASCADE,
        related_name="items",
        db_index=False,  # (record, run) is unique
    )
    run = models.ForeignKey("workflows.Run", on_delete=models.CASCADE, related_name="+")
    row = models.PositiveSmallIntegerField()
    source_node = models.CharField(max_length=255)
    kind = models.CharField(max_length=8)
    action = models.CharField(max_length=8)  # move / cancel / end
    target_node = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=12, choices=MigrationItemStatus.choices, default=MigrationItemStatus.SELECTED)
    command_id = models.BigIntegerField(null=True, blank=True)
    detail = models.CharField(max_length=64, blank=True, default="")  # a reason code, never a value
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "workflow_migration_items"
        constraints = [
            models.UniqueConstraint(fields=["record", "run"], name="workflow_migration_item_run"),
            # a run is frozen into at most one record at a time (SELECTED or RECORDED there)
            models.UniqueConstraint(
                fields=["run"],
                condition=models.Q(status__in=["SELECTED", "RECORDED"]),
                name="workflow_migration_item_open_run",
            ),
        ]
        indexes = [models.Index(fields=["record", "status", "id"], name="workflow_migration_item_todo")]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.action} {self.status}"
