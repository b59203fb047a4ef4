"""Human tasks: the approvals a run waits on, with their decision snapshot and, for a group
task, who has claimed it."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.fields import json_field


class TaskStatus(models.TextChoices):
    OPEN = "OPEN", _("Open")
    COMPLETING = "COMPLETING", _("Completing")
    COMPLETED = "COMPLETED", _("Completed")
    EXPIRED = "EXPIRED", _("Expired")
    CANCELLED = "CANCELLED", _("Cancelled")
    WITHDRAWN = "WITHDRAWN", _("Withdrawn")


class Task(models.Model):
    """A human task (approval). The decision snapshot is stored when the task opens."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        "workflows.Run",
        on_delete=models.CASCADE,
        related_name="tasks",
        db_index=False,  # (run, status) serves it
    )
    branch_id = models.CharField(max_length=255, blank=True, default="")
    step = models.CharField(max_length=255)
    title = models.CharField(max_length=500)
    description = models.TextField(blank=True, default="")
    task_type = models.CharField(max_length=64, default="approval")
    assignment_mode = models.CharField(max_length=16)  # user | group
    assignment_value = models.CharField(max_length=255)
    status = models.CharField(max_length=12, choices=TaskStatus.choices, default=TaskStatus.OPEN)
    decisions = json_field(default=list)  # [{"name", "schema", "label"}]
    require_version_stability = models.BooleanField(default=False)
    subject_version = models.CharField(max_length=64, blank=True, default="")
    due_at = models.DateTimeField(null=True, blank=True)
    reminder_every_seconds = models.FloatField(null=True, blank=True)
    reminder_count = models.PositiveIntegerField(default=0)
    reservation_owner = models.BigIntegerField(null=True, blank=True)  # COMPLETION command id
    decision = models.CharField(max_length=255, blank=True, default="")
    completed_by = models.CharField(max_length=255, blank=True, default="")
    # the group member working on a group task (username; blank: nobody), so two approvers
    # do not decide the same one; set and cleared by operations.claim_task / unclaim_task.
    # A database default: the engine inserts task rows with its own column list
    claimed_by = models.CharField(max_length=255, blank=True, default="", db_default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("task")
        verbose_name_plural = _("tasks")
        db_table = "workflow_tasks"
        indexes = [
            # the open tasks of a user or a group, in the API's order (created_at, id): a page
            # of a big group's tasks is read in order from here instead of sorting them all
            models.Index(
                fields=["assignment_mode", "assignment_value", "created_at", "id"],
                name="workflow_task_open_assigned",
                condition=models.Q(status__in=["OPEN", "COMPLETING"]),
            ),
            models.Index(fields=["run", "status"], name="workflow_task_by_run"),
        ]

    def __str__(self) -> str:
        return self.title
