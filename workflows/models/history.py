from __future__ import annotations

from django.db import models

from workflows.models.actors import ActorColumns
from workflows.models.fields import json_field


class HistoryEntry(ActorColumns):
    """Append-only history and decision log of a run (contiguous ``seq`` per run)."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(
        "workflows.Run",
        on_delete=models.CASCADE,
        related_name="history",
        db_index=False,  # (run, seq) is unique: that index serves every look-up by run
    )
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    at = models.DateTimeField()
    command_id = models.BigIntegerField(null=True, blank=True)
    step = models.CharField(max_length=255, blank=True, default="")
    branch_id = models.CharField(max_length=255, blank=True, default="")
    outcome = models.CharField(max_length=40, blank=True, default="")
    scope = models.CharField(max_length=255, blank=True, default="")
    definition_id = models.CharField(max_length=255, blank=True, default="")
    version = models.PositiveIntegerField(null=True, blank=True)
    plan_hash = models.CharField(max_length=64, blank=True, default="")
    state_version_before = models.PositiveIntegerField(null=True, blank=True)
    state_version_after = models.PositiveIntegerField(null=True, blank=True)
    executor_id = models.CharField(max_length=255, blank=True, default="")
    patch = json_field(null=True, blank=True)
    payload = json_field(null=True, blank=True)
    entry_version = models.PositiveSmallIntegerField(default=2)

    class Meta:
        db_table = "workflow_history"
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="workflow_history_position")]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"
