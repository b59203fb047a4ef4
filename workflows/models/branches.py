from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.fields import json_field


class BranchStatus(models.TextChoices):
    RUNNING = "RUNNING", _("Running")
    WAITING = "WAITING", _("Waiting")
    COMPLETED = "COMPLETED", _("Completed")
    FAILED = "FAILED", _("Failed")
    CANCELLED = "CANCELLED", _("Cancelled")
    SUPERSEDED = "SUPERSEDED", _("Superseded")


class Branch(models.Model):
    """A branch token of a fork: a path through the graph with waits of its own."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey("workflows.Run", on_delete=models.CASCADE, related_name="branches")
    fork_step = models.CharField(max_length=255)
    branch_id = models.CharField(max_length=255)
    generation = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=12, choices=BranchStatus.choices, default=BranchStatus.RUNNING)
    current_step = models.CharField(max_length=255, blank=True, default="")
    wait = json_field(null=True, blank=True)
    state = json_field(null=True, blank=True)  # the branch's working copy of the state
    result = json_field(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "workflow_branches"
        constraints = [
            models.UniqueConstraint(fields=["run", "fork_step", "branch_id"], name="workflow_branch_key"),
        ]

    def __str__(self) -> str:
        return f"branch {self.branch_id} of {self.fork_step}"


class Join(models.Model):
    """A fork's join row, decided once (compare-and-set on ``decided``)."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey("workflows.Run", on_delete=models.CASCADE, related_name="joins")
    fork_step = models.CharField(max_length=255)
    join_step = models.CharField(max_length=255)
    policy = models.CharField(max_length=8)
    required = models.PositiveIntegerField()
    base = json_field(null=True, blank=True)  # the state when the fork dispatched
    decided = models.BooleanField(default=False)
    outcome = models.CharField(max_length=16, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "workflow_joins"
        constraints = [models.UniqueConstraint(fields=["run", "fork_step"], name="workflow_join_key")]

    def __str__(self) -> str:
        return f"join {self.join_step} of {self.fork_step}"
